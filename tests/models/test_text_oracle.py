"""The Gemma 4 text decoder against transformers 5.23.0 on tiny random checkpoints of all five families.

Thresholds: f32 checkpoints, eager-attention f32 reference: max |Δlogits| / max |ref| ≤ 1e-4 (f32 math
in a different summation order over ~10 layers; observed ~1e-6). bf16 checkpoints: compared with
transformers' f32 run of the same bf16 weights, top-1 must agree on ≥ 99% of positions.
"""

import os

import numpy as np
import pytest

import markbase as mb
from oracle.families import FAMILIES, GREEDY_TOKENS, PROMPT_LEN, WINDOW

# Every backend built in runs the whole suite (metal-sim: the Metal kernels and dispatch, simulated).
DEVICES = mb.devices()


def reference(oracle, family):
    return np.load(os.path.join(oracle[family], "reference.npz"))


def rel_err(got, want):
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES)
def test_logits_match_transformers(oracle, load_model, family, device):
    ref = reference(oracle, family)
    assert len(ref["ids"]) == PROMPT_LEN and PROMPT_LEN >= 3 * WINDOW
    got = load_model(family, device=device).logits(ref["ids"])
    assert got.dtype == np.float32 and got.shape == ref["logits"].shape
    assert rel_err(got, ref["logits"]) <= 1e-4


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES)
def test_prefill_then_decode_equals_full_forward(oracle, load_model, family, device):
    ref = reference(oracle, family)
    ids = ref["ids"]
    model = load_model(family, device=device)
    full = model.logits(ids)
    sess = model.session()
    split = 5
    rows = [sess.prefill(ids[:split], all_logits=True)]
    for t in ids[split:]:
        rows.append(sess.decode(int(t))[None])
    assert sess.position == len(ids)
    stepwise = np.concatenate(rows)
    # f32 sums in two orders (decode GEMV, prefill GEMM); the random E4B amplifies them most: 7.6e-6 with the
    # GEMV's old per-row-count accumulators, 1.1e-5 with one layout for every row (batch-invariant decode).
    assert rel_err(stepwise, full) <= 2e-5
    assert rel_err(stepwise, ref["logits"]) <= 1e-4


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES)
def test_chunked_prefill_equals_full_forward(oracle, load_model, family, device):
    """Prefill in chunks smaller than the window exercises the ring buffer's chunk capacity."""
    ref = reference(oracle, family)
    chunked = load_model(family, prefill_chunk=5, device=device).logits(ref["ids"])
    assert rel_err(chunked, ref["logits"]) <= 1e-4


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_generation_matches_transformers(oracle, load_model, family, device):
    ref = reference(oracle, family)
    sess = load_model(family, device=device).session()
    logits = sess.prefill(ref["ids"])
    tokens = []
    for _ in range(GREEDY_TOKENS):
        tok = int(np.argmax(logits))
        tokens.append(tok)
        logits = sess.decode(tok)
    # 32 prompt + 64 generated tokens: decode crosses the sliding window (8) many times.
    np.testing.assert_array_equal(np.array(tokens), ref["greedy"])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES)
def test_bf16_checkpoint_top1(oracle, load_model, family, device):
    # precision="f32": the exact path (precision="auto" may take bf16 products on bf16 weights, held to its own
    # policy in tests/models/test_bf16_products_oracle.py).
    ref = reference(oracle, family)
    got = load_model(family, "bf16", device=device, precision="f32").logits(ref["ids"])
    agree = float(np.mean(got.argmax(-1) == ref["logits_bf16_f32"].argmax(-1)))
    assert agree >= 0.99, f"top-1 agreement {agree:.3f}"


def test_metal_sim_is_a_device_when_built():
    """CI builds metal-sim (clang-22): the model suite above must have run on it."""
    assert "metal-sim" in DEVICES, "metal-sim is not built (it needs clang++ 22 or newer at build time)"


def test_reset_restarts_the_session(oracle, load_model):
    ref = reference(oracle, "e2b")
    sess = load_model("e2b").session()
    a = sess.prefill(ref["ids"][:10])
    sess.reset()
    assert sess.position == 0
    b = sess.prefill(ref["ids"][:10])
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("chunk", [256, 5])
@pytest.mark.parametrize("family", ["e2b", "e4b"])
def test_kv_shared_prefill_shortcut(oracle, load_model, family, chunk, device):
    """A last-token prefill runs the trailing KV-reuse layers for the last row only (inner chunks skip them):
    its logits equal transformers' last row, and decoding on from that cache equals the full forward —
    every cache the later tokens read was still written for every row."""
    ref = reference(oracle, family)
    ids = ref["ids"]
    model = load_model(family, prefill_chunk=chunk, device=device)
    sess = model.session()
    last = sess.prefill(ids[:-4])
    assert rel_err(last, ref["logits"][len(ids) - 5]) <= 1e-4
    rows = [sess.decode(int(t)) for t in ids[-4:]]
    assert rel_err(np.stack(rows), ref["logits"][-4:]) <= 1e-4
