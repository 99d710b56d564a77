"""Batched decode (continuous batching's engine step): aggregate tokens/s of B sequences advanced together
by Session.step_batch, against one sequence alone, on the real-size E2B text stack (random bf16 weights).

Run explicitly: `PYTHONPATH=python python3 -m pytest bench/bench_batch.py` (reuses the bench_decode
checkpoint under $MARKBASE_BENCH_DIR or ./.bench-cache). Each of the B sessions first prefills its own
128-token prompt; a timed round is one batched step (B tokens). Decode is memory-bound: one step reads the
weights once whatever B is, so the aggregate roofline is B × (read bandwidth / weight bytes per token)
until compute binds. The issue's target: 4 streams ≥ 3× the single stream. Reported, never asserted.
A batched step runs its linears row-invariant (each row as it would alone: the decode GEMV for every row
count, never the GEMM), so 16 streams time the GEMV in four passes of 4 rows over each weight block.
"""

import numpy as np
import pytest

import markbase as mb
from markbase import _core

from bench_decode import bytes_per_token, real_checkpoint  # noqa: F401  (the shared checkpoint fixture)

_SINGLE: dict[str, float] = {}


@pytest.fixture(scope="module")
def model(real_checkpoint):  # noqa: F811
    return mb.load(real_checkpoint, max_context=1024)


@pytest.mark.parametrize("streams", [1, 2, 4, 8, 16])
def test_batched_decode(benchmark, model, streams, memory_bandwidth, summary):
    sessions = [model.session() for _ in range(streams)]
    for i, s in enumerate(sessions):
        s.prefill(np.arange(2 + i, 130 + i))
    samplers = [_core.Sampler(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
                              presence_penalty=0.0, frequency_penalty=0.0, seed=i) for i in range(streams)]
    tokens = [np.array([3 + i for i in range(streams)], np.int32)]
    core = [s._s for s in sessions]

    def step():
        tokens[0] = np.array(_core.gemma4.step_batch(core, tokens[0], samplers), np.int32)

    benchmark.pedantic(step, rounds=12, iterations=1, warmup_rounds=2)
    agg = streams / benchmark.stats.stats.median
    roofline = memory_bandwidth["read_pool"] * 1e9 / bytes_per_token(model) * streams
    if streams == 1:
        _SINGLE["tok_s"] = agg
    speedup = agg / _SINGLE["tok_s"] if "tok_s" in _SINGLE else float("nan")
    benchmark.extra_info.update(aggregate_tokens_per_s=agg, roofline_tokens_per_s=roofline,
                                roofline_fraction=agg / roofline, speedup_vs_single=speedup)
    summary.append(f"batched decode, {streams} stream(s): {agg:.2f} tok/s aggregate ({agg / streams:.2f} per stream), "
                   f"{speedup:.2f}x one stream; memory roofline {roofline:.1f} tok/s ({agg / roofline:.0%})")
