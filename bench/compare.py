#!/usr/bin/env python3
"""markbase side by side with llama.cpp and transformers on one real-size Gemma 4 E2B checkpoint.

    PYTHONPATH=python python3 bench/compare.py [--rounds 4 --reps 3] [--widths bf16,q8,q4[,q4-fast,q4-e4,q4-e4-fast]]
        [--engines markbase,llama.cpp,transformers] [--threads 2] [--quick]

Opt-in, never part of the tests. Speed is reported, never asserted.

What is measured, for every engine × width (bf16, q8, q4; transformers bf16 only), on the real-size
E2B text-only bf16 checkpoint with random weights (`markbase.testing.make_checkpoint(..., family="e2b",
size="real", dtype="bf16", text_only=True)`, reused from .bench-cache/e2b-real-bf16-text):
  - decode tok/s: a fresh cache, a 128-token prompt (untimed), then 32 greedy (argmax) steps timed;
  - prefill tok/s of 128 and of 512 tokens (a fresh cache each time; last-position logits);
  - peak RSS of the measuring process (ru_maxrss from os.wait4; mapped weight pages count once touched);
  - load time: until the engine's load call returns. Not the same work everywhere: markbase bf16 maps
    the checkpoint lazily (pages fault in during the first, untimed, forward), markbase q8/q4 quantize at
    load, llama.cpp populates its mapping (and repacks Q4_0/Q8_0 for AVX2), transformers copies every
    weight into torch tensors.
How:
  - the engines: markbase (`mb.load(dir, max_context=1024[, quantize="q8"|"q4"])`; width q4-fast / q8-fast
    adds precision="fast", q4-e4 embedding_bits=4 (q4-e4-fast both), compared with the others' q4 / q8), sessions as in
    bench/bench_decode.py; MARKBASE_NUM_THREADS); llama.cpp's llama-bench (`-t THREADS`; prefill
    `-p 128,512 -n 0`, decode `-p 0 -n 32 -d 128`, one process each) on GGUFs converted from the same
    checkpoint (BF16, then llama-quantize Q8_0 / Q4_0); transformers in bfloat16 (torch.set_num_threads,
    KV cache through past_key_values, logits_to_keep=1). Widths are not bit-identical formats: markbase
    q8/q4 are MLX-affine groups of 64 with an 8-bit embedding/LM head, llama.cpp's are Q8_0 / Q4_0 (blocks
    of 32, llama-quantize's default choices for the embedding and PLE table).
  - the page cache: every engine's weight files are evicted before round 1 (bench/_page_cache.py), so each engine
    reads its files back from disk its own way in round 1 and none starts from pages cached by earlier runs;
  - interleaved rounds: in round r every engine × width runs once, each in a fresh process, the order
    rotated by r; every test runs once untimed, then --reps times. The machine's bandwidth changes from
    second to second, so only figures from one run compare; each is shown as the median [min-max] over
    rounds × reps.
  - rooflines (bench/yardstick.py, measured at the start of every round, best kept): decode = weight
    bytes read per token (as the engine holds them: markbase's Model.decode_weight_bytes, the GGUF's
    tensors, the bf16 checkpoint for transformers; never the PLE table, a gather) / best read bandwidth;
    prefill = minimum FLOPs (bench/_roofline.py: the trailing KV-sharing layers for the last row only) /
    best f32 GEMM GFLOP/s (markbase or OpenBLAS), for the bf16 width the best bf16 GEMM GFLOP/s (markbase's
    bf16 products, torch's bf16 matmul, or the f32 peak, whichever is highest); the header also gives the
    FLOPs of running every row through every layer, which is what llama.cpp 0.3.36 does (transformers 5.23
    slices to logits_to_keep at the first KV-sharing layer, as markbase does).
How long: a full run (4 rounds × 3 reps, 7 cells) took 52 minutes on the 2-core machine, mostly quiet
(~13 minutes a round, a third of it transformers bf16); --quick (1 round, 1 rep) 6 to 15 minutes,
depending on how busy the machine is. The first run adds the downloads, build and conversion below.
What it downloads and builds (once, under .bench-cache/, see bench/_llamacpp.py): the llama-cpp-python
0.3.36 sdist from PyPI (~75 MB) for its vendored llama.cpp; a native build of llama-bench and
llama-quantize (~10 minutes on 2 cores, one per instruction-set level); GGUFs of the checkpoint
(BF16 9.3 GB, Q8_0 4.9 GB, Q4_0 3.3 GB, ~5 minutes). The checkpoint itself is ~9 GB if not there yet.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)

import _llamacpp  # noqa: E402
import _page_cache  # noqa: E402
import _roofline  # noqa: E402
import yardstick  # noqa: E402

CACHE = os.environ.get("MARKBASE_BENCH_DIR") or os.path.join(REPO, ".bench-cache")
ENGINES = ("markbase", "llama.cpp", "transformers")
WIDTHS = ("bf16", "q8", "q4")
# markbase only, compared with the other engines' plain width (the part before "-"): the same weights under
# precision="fast" (8-bit activations in the 4-bit decode GEMV), or with the tied embedding / LM head at
# 4 bits (embedding_bits=4).
VARIANT_WIDTHS = ("q8-fast", "q4-fast", "q4-e4", "q4-e4-fast")
SPEEDS = ("decode", "prefill_128", "prefill_512")
COLUMNS = (("decode", "decode tok/s"), ("prefill_128", "prefill-128 tok/s"), ("prefill_512", "prefill-512 tok/s"),
           ("rss_gb", "peak RSS GB"), ("load_s", "load s"))
CHILD_TIMEOUT = 3600


def log(msg: str) -> None:
    print(f"[compare {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------- measured subprocesses

def run_measured(cmd: list[str], env: dict) -> tuple[int, str, list[tuple[float, str]], float]:
    """Runs cmd to completion: (exit code, stdout, [(seconds since start, stderr line)], peak RSS in GB).
    stdout goes to a file (no pipe deadlock), stderr is read line by line as it comes (timestamps)."""
    with tempfile.TemporaryFile("w+") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, env=env, text=True)
        watchdog = threading.Timer(CHILD_TIMEOUT, proc.kill)
        watchdog.start()
        lines = []
        for line in proc.stderr:
            lines.append((time.perf_counter() - t0, line.rstrip("\n")))
        _, status, usage = os.wait4(proc.pid, 0)
        watchdog.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return proc.returncode, out.read(), lines, usage.ru_maxrss * 1024 / 1e9


def child_env(threads: int) -> dict:
    env = dict(os.environ, MARKBASE_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(REPO, "python"), env.get("PYTHONPATH")) if p)
    return env


def failure(cmd: list[str], code: int, lines) -> dict:
    tail = " | ".join(line for _, line in lines[-4:])
    return {"error": f"{os.path.basename(cmd[0])} exit {code}: {tail}"[:400]}


def measure_python(engine: str, width: str, checkpoint: str, reps: int, threads: int) -> dict:
    """markbase or transformers: one fresh process (bench/_compare_child.py)."""
    cmd = [sys.executable, os.path.join(BENCH, "_compare_child.py"), engine, width, checkpoint, str(reps), str(threads)]
    code, stdout, lines, rss = run_measured(cmd, child_env(threads))
    if code != 0:
        return failure(cmd, code, lines)
    result = json.loads(stdout.strip().splitlines()[-1])
    if "unavailable" not in result:
        result["rss_gb"] = rss
    return result


def llama_load_seconds(lines: list[tuple[float, str]]) -> float | None:
    """Time from llama-bench's first "starting" progress line to the next one (model load + context)."""
    start = next((t for t, line in lines if "benchmark 1/" in line and "starting" in line), None)
    after = next((t for t, line in lines if start is not None and t >= start and "benchmark 1/" in line
                  and "starting" not in line), None)
    return None if start is None or after is None else after - start


def measure_llama(gguf: str, reps: int, threads: int) -> dict:
    """llama.cpp: llama-bench once for the prefills, once for decode (two fresh processes)."""
    result: dict = {}
    rss = []
    for test in ("prefill", "decode"):
        cmd = _llamacpp.bench_command(CACHE, gguf, threads, reps, test)
        code, stdout, lines, peak = run_measured(cmd, child_env(threads))
        if code != 0:
            return failure(cmd, code, lines)
        result.update(_llamacpp.parse_bench(stdout))
        rss.append(peak)
        if test == "prefill":
            result["load_s"] = llama_load_seconds(lines)
    result["rss_gb"] = max(rss)
    return result


# ------------------------------------------------------------------------------------------ aggregation

class Cell:
    """Everything measured for one engine × width over the run."""

    def __init__(self, engine: str, width: str):
        self.engine, self.width = engine, width
        self.samples: dict[str, list[float]] = {k: [] for k, _ in COLUMNS}
        self.decode_bytes: int | None = None
        self.unavailable: str | None = None
        self.errors: list[str] = []
        self.info: dict = {}

    def add(self, result: dict) -> None:
        if "unavailable" in result:
            self.unavailable = result["unavailable"]
            return
        if "error" in result:
            self.errors.append(result["error"])
            return
        for key in SPEEDS:
            self.samples[key] += result.get(key, [])
        for key in ("rss_gb", "load_s"):
            if result.get(key) is not None:
                self.samples[key].append(result[key])
        if result.get("decode_bytes"):
            self.decode_bytes = result["decode_bytes"]
        if result.get("class"):
            self.info["class"] = result["class"]

    def median(self, key: str) -> float | None:
        s = self.samples[key]
        return statistics.median(s) if s else None


def roofline_fraction(cell: Cell, key: str, tok_s: float, limits: dict, flops: dict) -> float | None:
    if key == "decode" and cell.decode_bytes and limits["read_gbps"]:
        return tok_s * cell.decode_bytes / (limits["read_gbps"] * 1e9)
    if key.startswith("prefill_") and limits["gemm_gflops"]:
        T = int(key.split("_")[1])
        # bf16 weights may be multiplied in bf16 (markbase's bf16 products, torch, llama.cpp BF16): their peak
        peak = limits["gemm_bf16_gflops"] if cell.width == "bf16" else limits["gemm_gflops"]
        return flops[T] / (T / tok_s) / (peak * 1e9)
    return None


def format_figure(cell: Cell, key: str, limits: dict, flops: dict) -> str:
    s = cell.samples[key]
    if cell.unavailable:
        return f"n/a ({cell.unavailable})" if key == COLUMNS[0][0] else "n/a"
    if not s:
        return "failed" if cell.errors else "-"
    med = statistics.median(s)
    digits = 2 if med < 100 else 0
    text = f"{med:.{digits}f}" + (f" [{min(s):.{digits}f}-{max(s):.{digits}f}]" if len(s) > 1 else "")
    frac = roofline_fraction(cell, key, med, limits, flops) if key in SPEEDS else None
    return text + (f" {frac:4.0%}" if frac is not None else "")


def width_column(cells: list[Cell]) -> int:
    """Characters for the width column of the tables (q4-e4-fast is 10)."""
    return max([len("width")] + [len(c.width) for c in cells]) + 2


def print_table(cells: list[Cell], limits: dict, flops: dict) -> None:
    widths = [len(title) for _, title in COLUMNS]
    rows = []
    for c in cells:
        row = [format_figure(c, key, limits, flops) for key, _ in COLUMNS]
        widths = [max(w, len(x)) for w, x in zip(widths, row)]
        rows.append((c, row))
    ww = width_column(cells)
    print(f"{'engine':<13}{'width':<{ww}}" + "  ".join(t.ljust(w) for (_, t), w in zip(COLUMNS, widths)))
    for c, row in rows:
        print(f"{c.engine:<13}{c.width:<{ww}}" + "  ".join(x.ljust(w) for x, w in zip(row, widths)))
        for e in c.errors[:2]:
            print(f"{'':19}error: {e}")


def print_ratios(cells: list[Cell]) -> None:
    by = {(c.engine, c.width): c for c in cells}
    ww = width_column(cells)
    rows = []
    for other in ("llama.cpp", "transformers"):
        for w in WIDTHS + VARIANT_WIDTHS:
            mine, theirs = by.get(("markbase", w)), by.get((other, w.split("-")[0]))
            if not mine or not theirs:
                continue
            figures = []
            for key, _ in COLUMNS:
                a, b = mine.median(key), theirs.median(key)
                figures.append(f"{a / b:19.2f}" if a and b else f"{'-':>19}")
            if any(f.strip() != "-" for f in figures):
                rows.append(f"{'markbase/' + other:<22}{w:<{ww}}" + "".join(figures))
    if rows:
        print("\nratios of medians, markbase / other (speeds: > 1 = markbase faster; RSS and load: < 1 = markbase "
              "smaller/faster)")
        print(f"{'':{22 + ww}}" + "".join(f"{t:>19}" for _, t in COLUMNS))
        print("\n".join(rows))
    print()


# ------------------------------------------------------------------------------------------------- main

def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--widths", default=",".join(WIDTHS))
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--checkpoint", default=os.path.join(CACHE, "e2b-real-bf16-text"))
    ap.add_argument("--quick", action="store_true", help="1 round, 1 rep: a smoke test")
    ap.add_argument("--json", default=os.path.join(CACHE, "compare-last.json"), help="raw samples written here")
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.reps = 1, 1
    a.engines = [e for e in a.engines.split(",") if e]
    a.widths = [w for w in a.widths.split(",") if w]
    for e in a.engines:
        if e not in ENGINES:
            ap.error(f"unknown engine {e!r} (choose from {', '.join(ENGINES)})")
    for w in a.widths:
        if w not in WIDTHS + VARIANT_WIDTHS:
            ap.error(f"unknown width {w!r} (choose from {', '.join(WIDTHS + VARIANT_WIDTHS)}; -fast / -e4: markbase only)")
    return a


def ensure_checkpoint(path: str) -> str:
    if not os.path.exists(os.path.join(path, "generation_config.json")):
        from markbase.testing import make_checkpoint

        log(f"writing the real-size E2B text-only bf16 checkpoint to {path} (~9 GB)")
        make_checkpoint(path, family="e2b", size="real", dtype="bf16", text_only=True)
    return path


def prepare_llama(args, checkpoint: str) -> dict[str, str]:
    """{width: GGUF} for the llama.cpp cells (built and converted on first use); {} when impossible."""
    try:
        _llamacpp.build(CACHE)
        return _llamacpp.ggufs(CACHE, checkpoint, [w for w in args.widths if w in WIDTHS], args.threads)
    except Exception as e:  # reported in the table, the other engines still run
        log(f"llama.cpp unavailable: {e}")
        return {"error": str(e).splitlines()[0][:300]}


def cpu_pressure() -> float | None:
    """Linux's CPU pressure: % of the last minute in which some task waited for a CPU (how busy the
    shared machine was; our own 2 threads on 2 cores alone keep it near 0)."""
    try:
        with open("/proc/pressure/cpu") as f:
            return float(dict(kv.split("=") for kv in f.readline().split()[1:])["avg60"])
    except (OSError, KeyError, ValueError):
        return None


def measure_limits(limits: dict, threads: int) -> None:
    """Updates the run's best read bandwidth and GEMM peak with a measurement made now."""
    bw = yardstick.read_bandwidth(seconds=4.0, threads=threads)
    gemm = yardstick.gemm_peak(threads=threads)
    limits["read_samples"].append(bw)
    limits["gemm_samples"].append(gemm)
    limits["read_gbps"] = max(limits["read_gbps"], bw["best"])
    limits["gemm_gflops"] = max(limits["gemm_gflops"], gemm["best"])
    limits["gemm_bf16_gflops"] = max(limits["gemm_bf16_gflops"], gemm["bf16_best"])
    log(f"yardstick: read best {bw['best']:.1f} GB/s (median {bw['median']:.1f}, min {bw['min']:.1f}, n {bw['n']}); "
        f"f32 GEMM markbase {gemm['markbase']:.0f}, numpy {gemm['numpy']:.0f} GFLOP/s; bf16 GEMM markbase "
        f"{gemm['markbase_bf16']:.0f}, torch {gemm['torch_bf16']:.0f} GFLOP/s")


def package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def describe_run(args, checkpoint: str, limits: dict, flops: dict, cells: list[Cell], llama: dict) -> None:
    commit = subprocess.run(["git", "-C", REPO, "log", "-1", "--format=%h %ci"], capture_output=True,
                            text=True).stdout.strip()
    print(f"markbase compare: {os.path.basename(checkpoint)} (real-size E2B text decoder, random bf16 weights)")
    print(f"markbase {commit}; {platform.machine()}, ISA {_llamacpp.isa_tag()}, {args.threads} threads; "
          f"{args.rounds} rounds x {args.reps} reps, engine order rotated per round")
    pressure = [p for p in limits["pressure"] if p is not None]
    if pressure:
        print(f"CPU pressure after each measurement (% of the last minute some task waited for a CPU): median "
              f"{statistics.median(pressure):.0f}%, range {min(pressure):.0f}-{max(pressure):.0f}%")
    print(f"llama.cpp from the llama-cpp-python {_llamacpp.SDIST_VERSION} sdist; "
          f"transformers {package_version('transformers')}, torch {package_version('torch')}")
    if hasattr(os, "posix_fadvise"):
        print("page cache: every engine's weight files evicted before round 1 (each engine reads its own back)")
    reads = [s["best"] for s in limits["read_samples"]]
    print(f"read bandwidth (yardstick, {len(reads)} x 4 s): best {limits['read_gbps']:.1f} GB/s; per-round bests "
          + ", ".join(f"{x:.1f}" for x in reads)
          + "; medians " + ", ".join(f"{s['median']:.1f}" for s in limits["read_samples"]))
    g = limits["gemm_samples"]
    print(f"f32 GEMM peak (512x2048x2048): best {limits['gemm_gflops']:.0f} GFLOP/s "
          f"(markbase best {max(s['markbase'] for s in g):.0f}, OpenBLAS best {max(s['numpy'] for s in g):.0f})")
    print(f"bf16 GEMM peak (the same shape; the bf16 width's prefill %): best {limits['gemm_bf16_gflops']:.0f} GFLOP/s "
          f"(markbase bf16 products best {max(s['markbase_bf16'] for s in g):.0f}, torch bf16 best "
          f"{max(s['torch_bf16'] for s in g):.0f}, or the f32 peak)")
    print("weight bytes read per decode token: " + ", ".join(
        f"{c.engine} {c.width} {c.decode_bytes / 1e9:.2f} GB" for c in cells if c.decode_bytes))
    full = {T: _roofline.prefill_flops(checkpoint, T, minimum=False) for T in flops}
    print("prefill work: minimum (KV-sharing layers for the last row only; the % below) " +
          ", ".join(f"{T} tokens {f / 1e9:.0f} GFLOP" for T, f in flops.items()) +
          "; every row through every layer " + ", ".join(f"{f / 1e9:.0f}" for f in full.values()) + " GFLOP")
    if "error" in llama:
        print(f"llama.cpp: {llama['error']}")
    print("figures: median [min-max] over rounds x reps; % = roofline fraction (decode: bytes/token at the best "
          "read bandwidth; prefill: minimum FLOPs at the best GEMM peak, bf16 for the bf16 width)\n")


def main(argv=None) -> int:
    args = parse_args(argv)
    checkpoint = ensure_checkpoint(os.path.abspath(args.checkpoint))
    llama = prepare_llama(args, checkpoint) if "llama.cpp" in args.engines else {}
    cells = [Cell(e, w) for e in args.engines for w in args.widths
             if (e != "transformers" or w == "bf16") and (e == "markbase" or w not in VARIANT_WIDTHS)]
    for c in cells:
        if c.engine == "llama.cpp" and c.width in llama:
            c.decode_bytes = _llamacpp.decode_bytes(CACHE, llama[c.width])
        elif c.engine == "llama.cpp":
            c.unavailable = "llama.cpp not built/converted"
        elif c.engine == "transformers":
            c.decode_bytes = _roofline.checkpoint_decode_bytes(checkpoint)
    flops = {T: _roofline.prefill_flops(checkpoint, T) for T in (128, 512)}
    limits = {"read_gbps": 0.0, "gemm_gflops": 0.0, "gemm_bf16_gflops": 0.0, "read_samples": [], "gemm_samples": [],
              "pressure": []}

    weight_files = sorted(os.path.join(checkpoint, f) for f in os.listdir(checkpoint) if f.endswith(".safetensors"))
    weight_files += sorted({llama[c.width] for c in cells if c.engine == "llama.cpp" and not c.unavailable})
    # No engine starts from pages cached by an earlier run (bench/_page_cache.py); each reads its own back.
    _page_cache.evict(weight_files)
    log(f"evicted {len(weight_files)} weight files ({sum(map(os.path.getsize, weight_files)) / 1e9:.1f} GB) "
        "from the page cache")

    for r in range(args.rounds):
        measure_limits(limits, args.threads)
        order = cells[r % len(cells):] + cells[:r % len(cells)]
        for c in order:
            if c.unavailable:
                continue
            log(f"round {r + 1}/{args.rounds}: {c.engine} {c.width}")
            t0 = time.perf_counter()
            if c.engine == "llama.cpp":
                result = measure_llama(llama[c.width], args.reps, args.threads)
            else:
                result = measure_python(c.engine, c.width, checkpoint, args.reps, args.threads)
            c.add(result)
            limits["pressure"].append(cpu_pressure())
            log(f"  {time.perf_counter() - t0:.0f} s: " + json.dumps(result)[:300])

    describe_run(args, checkpoint, limits, flops, cells, llama)
    print_table(cells, limits, flops)
    print_ratios(cells)
    sys.stdout.flush()
    with open(args.json, "w") as f:
        json.dump({"limits": limits, "flops": flops, "cells": [vars(c) for c in cells]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
