"""Decode and prefill speed of the text decoder on a real-size synthetic checkpoint (random weights).

Run explicitly: `PYTHONPATH=python python3 -m pytest bench/bench_decode.py` (first run writes a ~9 GB
E2B text-only bf16 checkpoint to $MARKBASE_BENCH_DIR or ./.bench-cache). Decode is memory-bound: the
roofline is (bytes of weights read per token) / (memory bandwidth measured in the same run). Weights read
per token = every text weight except the PLE table (a gather of one row per token), with the tied
embedding counted once as the LM head. Speed is reported, never asserted.
"""

import os

import numpy as np
import pytest

import markbase as mb

FAMILY = os.environ.get("MARKBASE_BENCH_FAMILY", "e2b")


@pytest.fixture(scope="module")
def real_checkpoint():
    from markbase.testing import make_checkpoint

    root = os.environ.get("MARKBASE_BENCH_DIR") or os.path.join(os.path.dirname(os.path.dirname(__file__)), ".bench-cache")
    d = os.path.join(root, f"{FAMILY}-real-bf16-text")
    if not os.path.exists(os.path.join(d, "generation_config.json")):
        make_checkpoint(d, family=FAMILY, size="real", dtype="bf16", text_only=True)
    return d


def bytes_per_token(model) -> int:
    from markbase.memory import text_weight_bytes

    return text_weight_bytes(model.path, model.config)


def test_decode(benchmark, real_checkpoint, memory_bandwidth, summary):
    model = mb.load(real_checkpoint, max_context=4096)
    sess = model.session()
    prompt = np.arange(2, 130)
    sess.prefill(prompt)
    token = [3]

    def step():
        token[0] = int(np.argmax(sess.decode(token[0])))

    benchmark.pedantic(step, rounds=16, iterations=1, warmup_rounds=2)
    tok_s = 1.0 / benchmark.stats.stats.median
    nbytes = bytes_per_token(model)
    bandwidth = memory_bandwidth["read_pool"]  # decode reads weights; the copy figures count writes too
    roofline = bandwidth * 1e9 / nbytes
    benchmark.extra_info.update(tokens_per_s=tok_s, roofline_tokens_per_s=roofline, roofline_fraction=tok_s / roofline,
                                weight_bytes_per_token=nbytes)
    summary.append(f"{FAMILY} decode: {tok_s:.2f} tok/s, roofline {roofline:.2f} tok/s "
                   f"({nbytes / 1e9:.2f} GB/token at {bandwidth:.1f} GB/s read) -> {tok_s / roofline:.0%}")


def test_prefill(benchmark, real_checkpoint, summary):
    model = mb.load(real_checkpoint, max_context=4096)
    prompt = np.arange(2, 258)

    def run():
        model.session().prefill(prompt)

    benchmark.pedantic(run, rounds=3, iterations=1, warmup_rounds=1)
    tok_s = len(prompt) / benchmark.stats.stats.median
    benchmark.extra_info.update(tokens_per_s=tok_s)
    summary.append(f"{FAMILY} prefill of {len(prompt)} tokens: {tok_s:.1f} tok/s")
