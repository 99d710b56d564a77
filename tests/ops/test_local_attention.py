"""Parity tests for ops.local_attention (the audio conformer's chunked local attention with a relative-
position key term): every device's kernel vs the scalar reference vs a float64 numpy formula of the op's
contract, and that formula vs a float64 port of transformers' blocked algorithm (12-query blocks, 24-key
context windows, Transformer-XL rel_shift, the 5-D mask), which is what the op replaces.

Threshold: each output is a convex combination of ≤ W = 12 value rows; an f32 logit error δ (two dots
over d ≤ 256, ~1e-6 of |logit| ≤ 50) moves it by ≲ max|v|·δ. |got − want| ≤ 1e-5·|want| + 1e-5·max|v|
keeps ~10× headroom while a wrong key, distance or head moves outputs by ~max|v|/W ≈ 1e-1.
"""

import numpy as np
import pytest

from markbase._core import ops
from parity import assert_close, device_vs_reference, rng

RTOL = ATOL = 1e-5


def local_attention_np(q, k, v, rel, softcap):
    """The op's contract in float64: keys max(0, t−W+1) ≤ j ≤ t, logit = cap·tanh((q·k + q·rel[t−j]) / cap)."""
    q, k, v, rel = (np.asarray(x, np.float64) for x in (q, k, v, rel))
    T, H, d = q.shape
    W = rel.shape[0]
    out = np.zeros_like(q)
    for t in range(T):
        js = np.arange(max(0, t - W + 1), t + 1)
        ac = np.einsum("hd,jhd->hj", q[t], k[js])
        bd = np.einsum("hd,jhd->hj", q[t], rel[t - js])
        x = ac + bd
        if softcap > 0:
            x = softcap * np.tanh(x / softcap)
        p = np.exp(x - x.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        out[t] = np.einsum("hj,jhd->hd", p, v[js])
    return out


def hf_blocked_np(q, k, v, rel_desc, softcap, chunk=12, context_left=13):
    """transformers' Gemma4AudioAttention core in float64 (modeling_gemma4.py): queries in blocks of `chunk`,
    keys / values in windows of chunk + context_left − 1 with that many zero rows of left padding,
    matrix_bd via rel_shift over the embedding of distances [context_left−1, …, 0] (rel_desc), a mask that
    allows 0 ≤ i − j < context_left − 1, masked logits −1e9 after the cap."""
    q, k, v, rel_desc = (np.asarray(x, np.float64) for x in (q, k, v, rel_desc))
    T, H, d = q.shape
    past = context_left - 1
    ctx = chunk + past
    nb = (T + chunk - 1) // chunk
    qb = np.zeros((nb * chunk, H, d))
    qb[:T] = q
    qb = qb.reshape(nb, chunk, H, d)
    pad = lambda x: np.concatenate([np.zeros((past, H, d)), x, np.zeros((chunk - 1, H, d))])
    kp, vp = pad(k), pad(v)
    kb = np.stack([kp[b * chunk:b * chunk + ctx] for b in range(nb)])  # [nb, ctx, H, d]
    vb = np.stack([vp[b * chunk:b * chunk + ctx] for b in range(nb)])
    ac = np.einsum("bchd,bkhd->hbck", qb, kb)                          # [H, nb, chunk, ctx]
    bd = np.einsum("bchd,phd->hbcp", qb, rel_desc)                     # [H, nb, chunk, P]
    P = rel_desc.shape[0]
    bd = np.pad(bd, [(0, 0), (0, 0), (0, 0), (0, ctx + 1 - P)]).reshape(H, nb, chunk * (ctx + 1))
    bd = bd[..., :chunk * ctx].reshape(H, nb, chunk, ctx)             # the rel_shift
    x = ac + bd
    x = np.tanh(x / softcap) * softcap
    qi = (np.arange(nb)[:, None] * chunk + np.arange(chunk)[None, :])[:, :, None]       # [nb, chunk, 1]
    kj = np.arange(nb)[:, None, None] * chunk - past + np.arange(ctx)[None, None, :]   # [nb, 1, ctx]
    allowed = (qi - kj >= 0) & (qi - kj < past) & (kj >= 0) & (kj < T)
    x = np.where(allowed[None], x, -1e9)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = np.einsum("hbck,bkhd->bchd", p, vb).reshape(nb * chunk, H, d)
    return out[:T]


def make_case(T, H, d, W, seed):
    r = rng(seed)
    # q, k scaled as the conformer's (q·hd^-0.5/ln2·softplus(pds), k·1.89): logits of O(1..30)
    q = (r.normal(size=(T, H, d)) * 0.6).astype(np.float32)
    k = (r.normal(size=(T, H, d)) * 0.6).astype(np.float32)
    v = r.normal(size=(T, H, d)).astype(np.float32)
    rel = (r.normal(size=(W, H, d)) * 0.6).astype(np.float32)
    return q, k, v, rel


# (T, H, d, W): the conformer's (8 heads of 128, window 12) at lengths below, at and across the 12-query
# blocks, plus odd shapes (one head, d not a multiple of 8 or 32, a window of one, a window longer than T).
CASES = [(1, 8, 128, 12), (5, 8, 128, 12), (12, 8, 128, 12), (13, 8, 128, 12), (37, 8, 128, 12),
         (125, 8, 128, 12), (9, 1, 3, 12), (20, 3, 40, 5), (7, 2, 33, 1), (6, 2, 16, 64), (30, 4, 256, 12)]


@pytest.mark.parametrize("softcap", [50.0, 0.0, 2.0])
@pytest.mark.parametrize("T,H,d,W", CASES)
def test_local_attention_parity(T, H, d, W, softcap, device):
    q, k, v, rel = make_case(T, H, d, W, seed=T * 7 + d + W)
    what = f"local_attention T{T} H{H} d{d} W{W} cap{softcap}"
    _, ref = device_vs_reference(lambda **kw: ops.local_attention(q, k, v, rel, softcap=softcap, **kw), (T, H, d),
                                 "f32", device, what, rtol=RTOL, atol=ATOL * float(np.abs(v).max()))
    assert_close(ref, local_attention_np(q, k, v, rel, softcap), "f32", rtol=RTOL, atol=ATOL * float(np.abs(v).max()),
                 what=f"{what}: reference vs numpy")


@pytest.mark.parametrize("T", [1, 11, 12, 13, 24, 50])
def test_contract_equals_transformers_blocked_algorithm(T):
    # The closed form the op implements is transformers' blocked computation (spec §4.4): rel_desc holds
    # distances [12, 11, …, 0]; distance 12 exists in the embedding but is always masked.
    H, d = 3, 16
    q, k, v, _ = make_case(T, H, d, 12, seed=T)
    rel_desc = (rng(T + 100).normal(size=(13, H, d)) * 0.6)
    rel = rel_desc[::-1][:12]  # rel[δ] for δ = 0..11
    np.testing.assert_allclose(local_attention_np(q, k, v, rel, 50.0), hf_blocked_np(q, k, v, rel_desc, 50.0),
                               rtol=1e-12, atol=1e-12)


def test_each_key_and_distance_counts():
    # One key's value and one distance's embedding each move exactly the rows that see them.
    T, H, d, W = 30, 2, 8, 12
    q, k, v, rel = make_case(T, H, d, W, seed=3)
    base = ops.local_attention(q, k, v, rel, softcap=50.0).numpy()
    v2 = v.copy()
    v2[10] += 1.0
    moved = np.abs(ops.local_attention(q, k, v2, rel, softcap=50.0).numpy() - base).max(axis=(1, 2)) > 0
    assert moved.tolist() == [10 <= t <= 10 + W - 1 for t in range(T)]
    rel2 = rel.copy()
    rel2[W - 1] += 1.0
    moved = np.abs(ops.local_attention(q, k, v, rel2, softcap=50.0).numpy() - base).max(axis=(1, 2)) > 0
    assert moved.tolist() == [t >= W - 1 for t in range(T)]


def test_nan_stays_in_its_window(device):
    T, H, d, W = 30, 2, 8, 12
    q, k, v, rel = make_case(T, H, d, W, seed=4)
    k[5, 1, 3] = np.nan
    out = ops.local_attention(q, k, v, rel, softcap=50.0, device=device).numpy()
    bad = np.isnan(out).any(axis=2)  # [T, H]
    assert bad[:, 0].sum() == 0
    assert bad[:, 1].tolist() == [5 <= t <= 5 + W - 1 for t in range(T)]


@pytest.mark.parametrize("bad,operand", [
    (lambda q, k, v, r: (q, k[:-1], v, r), "k"),
    (lambda q, k, v, r: (q, k, v[:, :1], r), "v"),
    (lambda q, k, v, r: (q, k, v, r[:, :1]), "rel"),
    (lambda q, k, v, r: (q, k, v, r[:0]), "rel"),
    (lambda q, k, v, r: (q.astype(np.float16), k, v, r), "q"),
])
def test_bad_input(bad, operand):
    import markbase as mb
    q, k, v, rel = make_case(4, 2, 8, 3, seed=1)
    with pytest.raises(mb.MarkbaseError, match=operand):
        ops.local_attention(*bad(q, k, v, rel), softcap=50.0)


def test_metal_window_limit():
    import markbase as mb
    if "metal-sim" not in mb.devices():
        pytest.fail("metal-sim is not built (clang-22 missing?)")
    q, k, v, rel = make_case(4, 1, 8, 65, seed=2)
    with pytest.raises(mb.MarkbaseError, match="window of 65"):
        ops.local_attention(q, k, v, rel, device="metal-sim")
