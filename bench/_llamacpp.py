"""llama.cpp for bench/compare.py: source, build, GGUF conversion and llama-bench runs, all cached.

- Source: the llama.cpp vendored in PyPI's llama-cpp-python sdist (`pip download --no-deps --no-binary
  llama-cpp-python llama-cpp-python==SDIST_VERSION`, ~75 MB), extracted under CACHE/src.
- Build: cmake + ninja, Release, GGML_NATIVE=ON, no GPU backends, no OpenSSL; targets llama-bench and
  llama-quantize only, into CACHE/llama.cpp-build/<isa> — one build per instruction-set level, because a
  native build made on a day the machine shows AVX-512 would crash on a day it does not.
- Conversion: the vendored convert_hf_to_gguf.py (with its own gguf-py) turns the checkpoint into a BF16
  GGUF; llama-quantize makes Q8_0 and Q4_0 from it. The converter needs a tokenizer whose ids are dense
  over the whole 262,144-entry vocabulary; the synthetic checkpoint's own is sparse (a few hundred tokens
  with the specials at their real ids), so a conversion directory (symlinks to the weights) gets a copy
  with every free id filled by a `<unusedN>` token.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile

SDIST_VERSION = "0.3.36"
WIDTH_TYPES = {"bf16": "BF16", "q8": "Q8_0", "q4": "Q4_0"}  # compare.py width -> GGUF file type
_ISA_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile")


def _log(msg: str) -> None:
    print(f"[llama.cpp] {msg}", file=sys.stderr, flush=True)


def _run(cmd: list[str], log_path: str, **kwargs) -> None:
    """Runs cmd with its output in log_path; on failure raises with the log's tail."""
    with open(log_path, "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, **kwargs).returncode
    if rc != 0:
        with open(log_path) as f:
            tail = "".join(f.readlines()[-30:])
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed (exit {rc}); log {log_path}:\n{tail}")


def source_dir(cache: str) -> str:
    """The vendored llama.cpp tree of the llama-cpp-python sdist (downloaded and extracted once)."""
    root = os.path.join(cache, "src", f"llama_cpp_python-{SDIST_VERSION}")
    tree = os.path.join(root, "vendor", "llama.cpp")
    if os.path.exists(os.path.join(tree, "CMakeLists.txt")):
        return tree
    downloads = os.path.join(cache, "downloads")
    os.makedirs(downloads, exist_ok=True)
    sdist = os.path.join(downloads, f"llama_cpp_python-{SDIST_VERSION}.tar.gz")
    if not os.path.exists(sdist):
        _log(f"downloading the llama-cpp-python {SDIST_VERSION} sdist from PyPI")
        # --no-binary for this package only: its build dependencies may come as wheels (pip prepares the
        # sdist's metadata, which needs them; with --no-binary :all: it would build cmake from source).
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
              f"llama-cpp-python=={SDIST_VERSION}", "-d", downloads], os.path.join(downloads, "pip.log"))
    with tarfile.open(sdist) as tar:
        tar.extractall(os.path.join(cache, "src"), filter="data")
    return tree


def isa_tag() -> str:
    """The instruction-set extensions a native build depends on, as a directory name ("avx2", ...)."""
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    present = [x for x in _ISA_FLAGS if x in flags]
    return "-".join(present) or "generic"


def build(cache: str) -> str:
    """Directory holding bin/llama-bench and bin/llama-quantize, built for this machine's ISA level."""
    out = os.path.join(cache, "llama.cpp-build", isa_tag())
    tools = [os.path.join(out, "bin", t) for t in ("llama-bench", "llama-quantize")]
    if all(os.path.exists(t) for t in tools):
        return out
    src = source_dir(cache)
    os.makedirs(out, exist_ok=True)
    _log(f"building llama-bench and llama-quantize in {out} (several minutes on 2 cores)")
    # No AMX: ggml's AMX matmul (compiled in by -march=native) segfaults in prompt processing of the Q8_0 /
    # Q4_0 GGUFs (in ggml_backend_amx_mul_mat), seen here on "Intel Xeon" VMs both where the tile state is
    # not granted (2026-12-04) and where Linux grants it (2026-12-07; the BF16 GGUF, which ggml's AMX code
    # does not take, ran the same as without AMX).
    no_amx = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" if "amx_tile" in isa_tag() else ""
    _run(["cmake", "-S", src, "-B", out, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
          f"-DCMAKE_C_FLAGS={no_amx}", f"-DCMAKE_CXX_FLAGS={no_amx}",
          "-DGGML_CUDA=OFF", "-DGGML_METAL=OFF", "-DGGML_VULKAN=OFF", "-DLLAMA_OPENSSL=OFF",
          "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF",
          "-DLLAMA_BUILD_APP=OFF", "-DBUILD_SHARED_LIBS=OFF"], os.path.join(out, "configure.log"))
    _run(["ninja", "-C", out, "llama-bench", "llama-quantize"], os.path.join(out, "build.log"))
    return out


# ------------------------------------------------------------------------------------------- conversion

def write_dense_tokenizer(src_dir: str, dst_dir: str, vocab_size: int) -> None:
    """dst_dir/tokenizer.json: src_dir's BPE tokenizer with every id in [0, vocab_size) that it leaves
    free filled by an ordinary `<unusedN>` token (the converter walks ids 0..vocab_size-1), and
    tokenizer_config.json copied."""
    with open(os.path.join(src_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    vocab = tok["model"]["vocab"]
    used = set(vocab.values()) | {t["id"] for t in tok.get("added_tokens", [])}
    if max(used) >= vocab_size:
        raise ValueError(f"{src_dir}/tokenizer.json has ids beyond the model's vocab_size {vocab_size}")
    for i in range(vocab_size):
        if i not in used:
            vocab[f"<unused{i}>"] = i
    with open(os.path.join(dst_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    shutil.copy(os.path.join(src_dir, "tokenizer_config.json"), dst_dir)


def conversion_dir(checkpoint: str, dst: str) -> str:
    """A directory for the converter: symlinks to checkpoint's config and weights, a dense tokenizer."""
    os.makedirs(dst, exist_ok=True)
    for path in glob.glob(os.path.join(checkpoint, "*.safetensors")) + [
            os.path.join(checkpoint, n) for n in ("config.json", "model.safetensors.index.json",
                                                  "generation_config.json")]:
        link = os.path.join(dst, os.path.basename(path))
        if os.path.exists(path) and not os.path.lexists(link):
            os.symlink(os.path.abspath(path), link)
    if not os.path.exists(os.path.join(dst, "tokenizer.json")):
        with open(os.path.join(checkpoint, "config.json")) as f:
            cfg = json.load(f)
        write_dense_tokenizer(checkpoint, dst, (cfg.get("text_config") or cfg)["vocab_size"])
    return dst


def converter_supports(src: str, architecture: str) -> bool:
    """True when the vendored convert_hf_to_gguf registers a text model for `architecture`."""
    for path in glob.glob(os.path.join(src, "conversion", "*.py")) + [os.path.join(src, "convert_hf_to_gguf.py")]:
        with open(path, encoding="utf-8") as f:
            if f'"{architecture}"' in f.read():
                return True
    return False


def ggufs(cache: str, checkpoint: str, widths: list[str], threads: int) -> dict[str, str]:
    """{width: GGUF path} for bf16 / q8 / q4, converting and quantizing what is not cached yet."""
    src = source_dir(cache)
    with open(os.path.join(checkpoint, "config.json")) as f:
        arch = json.load(f)["architectures"][0]
    if not converter_supports(src, arch):
        raise RuntimeError(f"llama.cpp's convert_hf_to_gguf.py (llama-cpp-python {SDIST_VERSION}) has no {arch}")
    out_dir = os.path.join(cache, "gguf")
    os.makedirs(out_dir, exist_ok=True)
    name = os.path.basename(os.path.normpath(checkpoint))
    paths = {w: os.path.join(out_dir, f"{name}-{WIDTH_TYPES[w]}.gguf") for w in WIDTH_TYPES}
    if not os.path.exists(paths["bf16"]):
        _log(f"converting {checkpoint} to {paths['bf16']} (a few minutes)")
        conv = conversion_dir(checkpoint, os.path.join(cache, "gguf", f"{name}-convert-input"))
        env = dict(os.environ, PYTHONPATH=os.path.join(src, "gguf-py"))
        _run([sys.executable, os.path.join(src, "convert_hf_to_gguf.py"), conv, "--outtype", "bf16",
              "--outfile", paths["bf16"] + ".partial"], os.path.join(out_dir, f"{name}-convert.log"), env=env)
        os.replace(paths["bf16"] + ".partial", paths["bf16"])
    quantize = os.path.join(build(cache), "bin", "llama-quantize")
    for w in widths:
        if w != "bf16" and not os.path.exists(paths[w]):
            _log(f"quantizing to {WIDTH_TYPES[w]}: {paths[w]}")
            _run([quantize, paths["bf16"], paths[w] + ".partial", WIDTH_TYPES[w], str(threads)],
                 os.path.join(out_dir, f"{name}-quantize-{w}.log"))
            os.replace(paths[w] + ".partial", paths[w])
    return {w: paths[w] for w in widths}


def decode_bytes(cache: str, gguf_path: str) -> int:
    """Bytes of weights one decode step reads from this GGUF: every tensor but the per-layer token
    embedding table (a gather of one row per token); the token embedding counts once, as the tied LM head."""
    sys.path.insert(0, os.path.join(source_dir(cache), "gguf-py"))
    try:
        from gguf import GGUFReader
    finally:
        sys.path.pop(0)
    reader = GGUFReader(gguf_path)
    return sum(int(t.n_bytes) for t in reader.tensors if not t.name.startswith("per_layer_token_embd"))


# ---------------------------------------------------------------------------------------------- running

def bench_command(cache: str, gguf_path: str, threads: int, reps: int, test: str) -> list[str]:
    """llama-bench for one kind of test: "prefill" (-p 128,512 -n 0) or "decode" (-n 32 after a 128-token
    context, -d 128). JSON lines on stdout, progress lines on stderr (their timing gives the load time)."""
    args = ["-p", "128,512", "-n", "0"] if test == "prefill" else ["-p", "0", "-n", "32", "-d", "128"]
    return [os.path.join(build(cache), "bin", "llama-bench"), "-m", gguf_path, "-t", str(threads),
            "-r", str(reps), "-o", "jsonl", "--progress", *args]


def parse_bench(stdout: str) -> dict[str, list[float]]:
    """llama-bench JSON lines -> {"prefill_128": [tok/s per rep], "prefill_512": ..., "decode": ...}."""
    out: dict[str, list[float]] = {}
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        key = f"prefill_{r['n_prompt']}" if r["n_prompt"] else "decode"
        out[key] = [float(x) for x in r["samples_ts"]]
    return out
