"""Memory for many sessions, and sessions that outlive their files (issue 38, item 10).

- The plan covers N sessions (markbase/memory.py check_sessions): generate_batch sizes each session to its
  prompt and max_new_tokens, checks the whole batch before any session exists, and its figure bounds the
  process's measured peak; a batch that does not fit is an InputError with the numbers, refused before
  anything is allocated; Model.check_sessions answers the same for a server's sessions.
- The measuring arena reserves address space as it needs it: sessions run under an RLIMIT_AS of a few GB
  (it used to reserve 2 × 16 GiB per measuring pass).
- A checkpoint file truncated under a live session is a CheckpointError at its next forward (one fstat per
  file before each), not a SIGBUS.
The memory figures are taken in fresh processes (VmHWM), the SIGBUS case too (it would kill pytest)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import markbase as mb


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from markbase.testing import make_checkpoint

    return str(make_checkpoint(tmp_path_factory.mktemp("sessions") / "e2b", family="e2b", size="tiny",
                               dtype="bf16", seed=1))


def run_script(script: str, *args, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "MARKBASE_NUM_THREADS": "2", **(env or {})})


def last_json(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


_PRELUDE = """
import json, sys
from collections import Counter
import numpy as np
import markbase as mb
from markbase.memory import model_bytes, sessions_need

def status(key):
    return next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith(key + ':'))
"""

# generate_batch of n prompts: the process's peak above what it held before loading, and above what it held
# once loaded; the plan's figures for the model and for the batch's sessions.
_BATCH = _PRELUDE + """
path, n = sys.argv[1], int(sys.argv[2])
before_load = status('VmRSS')
model = mb.load(path)
prompts = [f"Prompt number {i}: say something." for i in range(n)]
loaded = status('VmHWM')
prepared = [model.prepare(p, max_new_tokens=3, temperature=0) for p in prompts]
contexts = [min(len(p.ids) + o.max_new_tokens, model.max_context) for p, o in prepared]
need = sessions_need(model._memory_plan, model._core, Counter(contexts), "batch", batch_rows=n)
try:
    results = model.generate_batch(prompts, max_new_tokens=3, temperature=0)
    error = None
except mb.MarkbaseError as e:
    results, error = [], f"{type(e).__name__}: {e}"
print(json.dumps({"peak": status('VmHWM') - before_load, "batch_peak": status('VmHWM') - loaded,
                  "need": need.total_bytes, "model": model_bytes(model._memory_plan),
                  "available": model._memory_plan.available_bytes, "done": len(results), "error": error}))
"""


def test_batch_of_300_prompts_fits_and_the_plan_bounds_its_peak(ckpt):
    """Under MARKBASE_MEMORY_LIMIT=1e9 the issue's 300-prompt batch peaked at 1.77 GB with no error (each
    session at max_context, each sampler holding 5 MB of vocabulary tables). Sized to what each prompt needs,
    it fits, and the plan's figure for its sessions bounds the measured peak."""
    got = last_json(run_script(_BATCH, ckpt, 300, env={"MARKBASE_MEMORY_LIMIT": "1e9"}))
    print(f"300 prompts: peak +{got['peak'] / 1e6:.0f} MB over the process before load, plan "
          f"{(got['model'] + got['need']) / 1e6:.0f} MB (model {got['model'] / 1e6:.0f} + sessions "
          f"{got['need'] / 1e6:.0f})")
    assert got["error"] is None and got["done"] == 300
    assert got["model"] + got["need"] <= got["available"]
    assert got["peak"] <= got["model"] + got["need"], "the plan must bound what the model and its batch took"


def test_batch_that_does_not_fit_is_refused_before_allocating(ckpt):
    """The same batch under a limit that holds the model but not 300 sessions: an InputError stating the
    numbers, and the process's peak memory does not move (no session was made)."""
    from markbase.memory import model_bytes

    model_share = model_bytes(mb.load(ckpt)._memory_plan)
    limit = model_share + 100e6  # the 300 sessions need ~650 MB here (their logits alone 315 MB)
    got = last_json(run_script(_BATCH, ckpt, 300, env={"MARKBASE_MEMORY_LIMIT": str(int(limit))}))
    assert got["done"] == 0 and got["need"] > limit - model_share
    assert got["error"].startswith("InputError: generate_batch of 300 prompts: does not fit in memory: 300 "
                                   "session(s) of up to"), got["error"]
    assert "MB is available" in got["error"] and "logits" in got["error"]
    assert got["batch_peak"] < 20e6, f"refused after allocating: peak +{got['batch_peak'] / 1e6:.0f} MB"


# n sessions at full context (a server's batch and prompt cache): every cache slot written, one batched step.
_FULL = _PRELUDE + """
path, n, context = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
before_load = status('VmRSS')
model = mb.load(path, max_context=context)
figures = model.check_sessions(n, what="server", batch_rows=n)
sessions = [model.session() for _ in range(n)]
rng = np.random.default_rng(0)
for s in sessions:
    s.prefill(rng.integers(3, 1000, context - 1))
mb._core.gemma4.decode_batch([s._s for s in sessions], np.full(n, 5, np.int32))
print(json.dumps({"peak": status('VmHWM') - before_load, "figures": figures, "model": model_bytes(model._memory_plan),
                  "kv": [s._s.cache_bytes() for s in sessions], "arena": [s._s.arena_bytes() for s in sessions]}))
"""


def test_check_sessions_bounds_full_sessions(ckpt):
    """Model.check_sessions (what a server calls at startup for --max-batch + --prompt-cache sessions): its
    figures are what full sessions hold (KV caches within 1%, arenas exactly, a ring past its wrap), and
    with the model's share they bound the peak of loading, filling them all and stepping them together."""
    n, context = 12, 700  # past the sliding layers' ring (window - 1 + one 512-token chunk)
    got = last_json(run_script(_FULL, ckpt, n, context))
    fig = got["figures"]
    print(f"{n} sessions of {context}: peak +{got['peak'] / 1e6:.1f} MB, plan {got['model'] / 1e6:.1f} MB model + "
          f"{fig['total_bytes'] / 1e6:.1f} MB sessions")
    assert fig["sessions"] == n and fig["max_context"] == context and fig["batch_rows"] == n
    assert abs(sum(got["kv"]) - fig["kv_bytes"]) <= 0.01 * fig["kv_bytes"]
    assert sum(got["arena"]) <= fig["arena_bytes"]
    assert got["peak"] <= got["model"] + fig["total_bytes"]


def test_check_sessions_refuses_with_the_numbers(ckpt, monkeypatch):
    model = mb.load(ckpt, max_context=512)
    one = model.check_sessions(1, batch_rows=0)
    assert one["batch_rows"] == 0 and one["batch_bytes"] == 0 and one["sessions"] == 1
    eight = model.check_sessions(8, context=100)
    assert eight["batch_rows"] == 8 and eight["max_context"] == 100 and eight["sampler_bytes"] == 0
    vocab = model.config.text_config.vocab_size
    server = model.check_sessions(8 + 4, what="server", batch_rows=8, penalties=True)
    assert server["sampler_bytes"] == 5 * vocab * 8  # the running sequences' samplers, not the cached sessions'
    assert server["logits_bytes"] == 4 * vocab * 12
    from markbase.memory import model_bytes

    monkeypatch.setenv("MARKBASE_MEMORY_LIMIT", str(int(model_bytes(model._memory_plan)
                                                        + model.memory_plan()["kv_cache_bytes"] + 30e6)))
    small = mb.load(ckpt, max_context=512)
    small.check_sessions(2)
    with pytest.raises(mb.ConfigError, match=r"^markbase serve --max-batch 64: does not fit in memory: 68 session\(s\) "
                                             r"of up to 512 tokens need [\d.]+ MB = KV caches .* MB is available"):
        small.check_sessions(64 + 4, what="markbase serve --max-batch 64", batch_rows=64)
    with pytest.raises(mb.ConfigError, match="1000000000000 session"):  # counted, not listed
        small.check_sessions(10**12, batch_rows=0)
    for bad in ({"n": 0}, {"n": 2.5}, {"n": 2, "context": 513}, {"n": 2, "batch_rows": -1}, {"n": True}):
        with pytest.raises(mb.InputError, match="check_sessions: "):
            small.check_sessions(**bad)


_ULIMIT = """
import resource, sys
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import numpy as np
import markbase as mb
model = mb.load(sys.argv[1])
s = model.session()
s.prefill(np.arange(3, 603))  # two chunks: the 512-token measuring pass and its outputs
print(model.generate("Hello", max_new_tokens=3, temperature=0).token_ids)
"""


def test_sessions_run_under_an_address_space_limit(ckpt):
    """RLIMIT_AS of 4 GiB (`ulimit -v`): every session used to fail, its measuring passes reserving two
    16 GiB arenas ("cannot reserve 17179869184 bytes of address space for a measuring arena")."""
    out = run_script(_ULIMIT, ckpt, 4 << 30)
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(json.loads(out.stdout.splitlines()[-1])) == 3


_TRUNCATE = """
import os, sys
import numpy as np
import markbase as mb
path, call = sys.argv[1], sys.argv[2]
model = mb.load(path)
s = model.session()
s.prefill([2, 5, 6])
weights = os.path.join(path, "model.safetensors")
os.rename(weights, weights + ".moved")  # the check follows the file itself, not its path
os.truncate(weights + ".moved", os.path.getsize(weights + ".moved") // 2)
sampler = mb._core.Sampler(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
                           presence_penalty=0.0, frequency_penalty=0.0, seed=0)
calls = {"decode": lambda: s.decode(5), "prefill": lambda: s.prefill([7, 8]), "step": lambda: s.step(5, sampler),
         "step_batch": lambda: mb._core.gemma4.step_batch([s._s], np.array([5], np.int32), [sampler]),
         "embed": lambda: model.embed([2, 5]), "logits": lambda: model.logits([2, 5]),
         "encode_image": lambda: model.encode_image(np.zeros((64, 64, 3), np.uint8)),
         "encode_audio": lambda: model.encode_audio((np.zeros(16000, np.float32), 16000))}
try:
    calls[call]()
    print("no error")
except mb.CheckpointError as e:
    print(f"CheckpointError: {e}")
"""


@pytest.mark.parametrize("call", ["decode", "prefill", "step", "step_batch", "embed", "logits", "encode_image",
                                  "encode_audio"])
def test_file_truncated_under_a_live_session(ckpt, tmp_path, call):
    """Truncated (after a rename) between two calls of a live session: the next forward is a CheckpointError
    naming the file (it used to read the lost pages: SIGBUS, the process killed)."""
    import shutil

    path = tmp_path / "copy"
    shutil.copytree(ckpt, path)
    out = run_script(_TRUNCATE, path, call)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stderr[-2000:]}"
    assert out.stdout.strip().startswith(f"CheckpointError: {path}/model.safetensors: truncated from "), out.stdout
    assert "load it again" in out.stdout
