"""Memory bounds at load (issue 14, item 3): the plan's figures against the model's real caches and
tensors, a max_context that does not fit refused with the numbers, and the default max_context shrunk to
what fits (MARKBASE_MEMORY_LIMIT stands in for the machine's available memory)."""

import os

import numpy as np
import pytest

import markbase as mb
from markbase.io import open_checkpoint


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from markbase.testing import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("plan") / "e2b", family="e2b", size="tiny", dtype="bf16", seed=1,
                           text_only=True)


def test_plan_figures(ckpt):
    model = mb.load(ckpt, max_context=64)
    plan = model.memory_plan()
    tc = model.config.text_config
    # Text weights read every step: every text tensor but the PLE table, as stored.
    ck = open_checkpoint(ckpt)
    mapped = sum(ck.offsets(n)[1] - ck.offsets(n)[0] for n in ck.keys()
                 if n.startswith("model.language_model.") and "embed_tokens_per_layer" not in n)
    assert plan["weights_mapped_bytes"] == mapped and plan["weights_resident_bytes"] == 0
    # The model's own count of a decode step's bytes leaves the PLE table out too: it differs from the plan's by
    # the norms and scalars alone (the plan counts every stored text tensor), far below the table's bytes.
    ple = sum(ck.offsets(n)[1] - ck.offsets(n)[0] for n in ck.keys() if "embed_tokens_per_layer" in n)
    assert 0 <= mapped - model._core.decode_weight_bytes < ple // 100
    per_token = sum(2 * l.num_key_value_heads * l.head_dim * 4 + 8 for l in tc.layers
                    if l.kv_mode != "reuse" and not l.is_sliding)
    assert plan["kv_bytes_per_token"] == per_token
    assert plan["total_bytes"] == (plan["weights_mapped_bytes"] + plan["kv_cache_bytes"] + plan["arena_bytes"])
    # The KV figure is what a session holds once full (to 1%: the caches' small bookkeeping is not counted).
    sess = model.session()
    sess.prefill(np.full(64, 5))
    assert abs(sess._s.cache_bytes() - plan["kv_cache_bytes"]) <= 0.01 * plan["kv_cache_bytes"]


def test_max_context_that_does_not_fit_is_refused_with_the_numbers(ckpt, monkeypatch):
    small = mb.load(ckpt, max_context=64).memory_plan()
    per_token = small["kv_bytes_per_token"] + small["kv_ring_slot_bytes"]  # (the rings are longer than 64)
    monkeypatch.setenv("MARKBASE_MEMORY_LIMIT", str(small["total_bytes"] + 1000 * per_token))
    with pytest.raises(mb.ConfigError, match=r"needs .* GB = text weights .* KV cache .* at max_context 4096 .* "
                                               r"GB is available; lower max_context"):
        mb.load(ckpt, max_context=4096)
    model = mb.load(ckpt)  # no max_context: the longest that fits
    plan = model.memory_plan()
    assert 64 + 1000 <= model.max_context < model.config.text_config.max_position_embeddings
    assert plan["max_context"] == model.max_context
    # It fits, and one more token would not (past the rings' length only the full layers grow).
    assert plan["total_bytes"] <= plan["available_bytes"] < plan["total_bytes"] + plan["kv_bytes_per_token"]
    assert model.session().prefill(np.full(model.max_context - 1, 5)).shape  # and it runs at that length


def test_quantized_plan_and_nothing_fits(ckpt, monkeypatch):
    plan = mb.load(ckpt, max_context=64, quantize="q4").memory_plan()
    assert plan["weights_mapped_bytes"] == 0 and plan["weights_resident_bytes"] > 0
    monkeypatch.setenv("MARKBASE_MEMORY_LIMIT", "1000")
    with pytest.raises(mb.ConfigError, match="even a 1-token context does not fit"):
        mb.load(ckpt)
    monkeypatch.setenv("MARKBASE_MEMORY_LIMIT", "lots")
    with pytest.raises(mb.ConfigError, match="MARKBASE_MEMORY_LIMIT"):
        mb.load(ckpt)


def anon_bytes_after_load(path: str) -> int:
    """RssAnon of a fresh process that has loaded `path` (mapped checkpoint pages are RssFile, not counted)."""
    import subprocess
    import sys

    script = (f"import markbase as mb\nm = mb.load({path!r}, max_context=64)\n"
              "print(next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('RssAnon:')))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def test_mlx_ple_table_stays_mapped(tmp_path):
    """An MLX PLE table at 6 bits (a width the linear kernels lack) is gathered at its stored width, so it stays
    a lazily touched mapping: loading it adds no anonymous memory beside the same table at 4 bits (widened to
    bytes it would add V·96 bytes, 25 MB here; 2.35 GB for a real E2B), and the plan counts neither."""
    from markbase.memory import plan_for
    from markbase.models.gemma4 import load_config
    from markbase.testing import make_checkpoint
    from oracle.quantized import with_mlx_ple_table

    src = make_checkpoint(tmp_path / "q4", family="e4b", size="tiny", dtype="f32", seed=1, text_only=True, bits=4)
    six, four = str(tmp_path / "six"), str(tmp_path / "four")
    name = with_mlx_ple_table(src, six, 6)
    with_mlx_ple_table(src, four, 4)
    rows, cols = open_checkpoint(src).shape(name)
    grown = anon_bytes_after_load(six) - anon_bytes_after_load(four)
    assert grown < rows * cols // 4, f"loading the 6-bit table added {grown} anonymous bytes (widened: {rows * cols})"
    plans = [plan_for(d, load_config(d), 64, 0, 64) for d in (six, four, src)]
    assert len({(p.weights_mapped_bytes, p.weights_resident_bytes) for p in plans}) == 1


_MEASURE = """
import json, sys
import numpy as np
import markbase as mb

def status(key):
    return next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith(key + ':'))

def checkpoint_rss(folder):
    # resident bytes of the mappings of the checkpoint's own files (/proc/self/smaps)
    total, inside = 0, False
    for line in open('/proc/self/smaps'):
        head = line.split()
        if head and '-' in head[0] and len(head) >= 5:
            inside = len(head) >= 6 and head[5].startswith(folder)
        elif inside and line.startswith('Rss:'):
            total += int(head[1]) * 1024
    return total

path, context = sys.argv[1], int(sys.argv[2])
base = {k: status(k) for k in ('VmRSS', 'RssAnon', 'RssFile')}
model = mb.load(path, max_context=context)
sess = model.session()
ids = np.random.default_rng(0).integers(3, 1000, context - 1)
sess.prefill(ids)          # every cache slot of the context written
sess.decode(5)             # and one decode step: every text weight the plan counts read
print(json.dumps({"base": base, "hwm": status('VmHWM'), "anon": status('RssAnon'), "file": checkpoint_rss(path),
                  "plan": model.memory_plan(), "arena": sess._s.arena_bytes(), "kv": sess._s.cache_bytes()}))
"""


@pytest.mark.parametrize("context", [512, 4096])
def test_plan_matches_measured_peak_memory(tmp_path, context):
    """The plan against a real load: a fresh process loads a checkpoint, fills its whole context and decodes.
    - its peak resident memory (VmHWM) above what it held before loading stays within the plan's total;
    - the checkpoint's pages it maps (the Rss of its files' mappings) are the plan's mapped weights within 10%;
    - its anonymous memory holds the planned KV cache and the session's arena, and no more than the KV cache plus
      the plan's activation allowance (which also covers the kernels' per-thread scratch: ~10-25 MB here, growing
      with the context through the attention's packed keys)."""
    import json
    import subprocess
    import sys

    from markbase.testing import make_checkpoint

    path = make_checkpoint(tmp_path / "e2b", family="e2b", size="tiny", dtype="bf16", seed=2, text_only=True)
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(path), str(context)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    plan, base = got["plan"], got["base"]
    peak, mapped, anon = got["hwm"] - base["VmRSS"], got["file"], got["anon"] - base["RssAnon"]
    print(f"context {context}: peak +{peak / 1e6:.1f} MB (plan {plan['total_bytes'] / 1e6:.1f}), mapped "
          f"+{mapped / 1e6:.1f} (plan {plan['weights_mapped_bytes'] / 1e6:.1f}), anonymous +{anon / 1e6:.1f} (KV "
          f"{got['kv'] / 1e6:.1f}, arena {got['arena'] / 1e6:.1f}, allowance {plan['arena_bytes'] / 1e6:.1f})")
    assert peak <= plan["total_bytes"], "the plan must bound what a load takes"
    assert abs(mapped - plan["weights_mapped_bytes"]) <= 0.1 * plan["weights_mapped_bytes"]
    assert abs(got["kv"] - plan["kv_cache_bytes"]) <= 0.01 * plan["kv_cache_bytes"]
    assert plan["kv_cache_bytes"] + got["arena"] <= anon <= plan["kv_cache_bytes"] + plan["arena_bytes"]


def test_session_arena_is_sized_to_its_context(ckpt):
    """A session allocates the arena the core measures for its context (what check_sessions counts): its
    longest chunk rounded up to a power of two, at most prefill_chunk, so a short session holds a small one."""
    model = mb.load(ckpt, max_context=2048, prefill_chunk=512)
    sizes = {}
    for context in (1, 5, 16, 100, 512, 2048):
        sizes[context] = model.session(max_context=context)._s.arena_bytes()
        assert sizes[context] == model._core.session_arena_bytes(context)
    assert sizes[5] < sizes[100] < sizes[512] == sizes[2048]
    assert model._core.session_arena_bytes(9) == model._core.session_arena_bytes(16)  # one measured size
    # A batched step of 8 rows runs through an arena of 8 rows' activations, whatever its sessions' contexts.
    assert model._core.batch_arena_bytes(8) < sizes[512]
    sessions = [model.session(max_context=5) for _ in range(8)]
    for s in sessions:
        s.prefill([2, 5, 6])
    mb._core.gemma4.decode_batch([s._s for s in sessions], np.full(8, 7, np.int32))
    assert sessions[0]._s.arena_bytes() == max(sizes[5], model._core.batch_arena_bytes(8))
