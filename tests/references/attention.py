"""Shared by tests/ops/test_attention.py and tests/metal/test_sim_attention.py.

Threshold (derived in tests/ops/test_attention.py's docstring): outputs are convex combinations of value
rows, so |got − want| <= RTOL·|want| + ATOL·max|v|.
"""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import HEAD_DIMS, assert_close, run_guarded

RTOL = 1e-5
ATOL = 1e-5

HEADS = [(1, 1), (8, 1), (8, 2), (4, 4)]  # (Hq, Hkv)
MASKS = [
    dict(causal=True),
    dict(causal=False),
    dict(causal=True, window=8),
    dict(causal=False, window=8),
    dict(causal=True, softcap=1.5),
    dict(causal=True, window=5, scale=0.37),
    dict(causal=False, softcap=3.0, scale=2.0),
]
LAYOUTS = ["linear", "ring", "headmajor"]


def parity_grid(ts, ss):
    """Params (d, heads, T, S, mask, layout) of 18 cases in which every head dim, head layout, T of ts,
    S of ss, mask kind and cache layout appears (not the full product)."""
    grid = [(HEAD_DIMS[i % 5], HEADS[i % 4], ts[i % 3], ss[(i // 3) % 3], MASKS[i % 7], LAYOUTS[(i // 5) % 3])
            for i in range(18)]
    return [pytest.param(*g, id=f"d{g[0]}-h{g[1][0]}x{g[1][1]}-T{g[2]}-S{g[3]}-m{i % 7}-{g[5]}")
            for i, g in enumerate(grid)]


def mask_np(q_pos, k_pos, q_block, k_block, causal, window, block_overrides_window):
    """allowed[t, s] (the op's contract) as a boolean [T, S] array."""
    qp = np.asarray(q_pos, np.int64)[:, None]
    kp = np.asarray(k_pos, np.int64)[None, :]
    valid = kp >= 0
    causal_ok = (kp <= qp) if causal else np.ones_like(valid)
    window_ok = (kp > qp - window) if window else np.ones_like(valid)
    if q_block is not None:
        qb = np.asarray(q_block)[:, None]
        same = (qb >= 0) & (qb == np.asarray(k_block)[None, :])
    else:
        same = np.zeros_like(valid)
    if block_overrides_window:
        return valid & ((causal_ok & window_ok) | same)
    return valid & (causal_ok | same) & window_ok


def qkv(r, T, Hq, S, Hkv, d):
    """q, k like RMS-normalised projections scaled to logits of std ≈ 2; v of unit scale."""
    sigma = (4.0 / d) ** 0.25
    q = (r.normal(size=(T, Hq, d)) * sigma).astype(np.float32)
    k = (r.normal(size=(S, Hkv, d)) * sigma).astype(np.float32)
    v = r.normal(size=(S, Hkv, d)).astype(np.float32)
    return q, k, v


def make_cache(r, k, v, layout):
    """Places S keys (positions 0..S-1) into a cache. Returns (k_arg, v_arg, k_pos, k_np, v_np):
    the op's k / v arguments, the slot positions, and the slot contents as numpy [slots, Hkv, d].
      linear:    keys in position order, contiguous
      ring:      slots in permuted order plus empty slots (k_pos −1, contents NaN), contiguous
      headmajor: as ring, stored head-major [Hkv, cap, d + pad] and passed as a transposed view"""
    S, Hkv, d = k.shape
    if layout == "linear":
        return k, v, np.arange(S, dtype=np.int32), k, v
    cap = S + S // 4 + 2
    slot_pos = np.full(cap, -1, np.int32)
    slots = r.permutation(cap)[:S]
    slot_pos[slots] = np.arange(S, dtype=np.int32)
    kc = np.full((cap, Hkv, d), np.nan, np.float32)
    vc = np.full((cap, Hkv, d), np.nan, np.float32)
    kc[slots], vc[slots] = k, v
    if layout == "ring":
        return kc, vc, slot_pos, kc, vc
    assert layout == "headmajor"
    pad = 5
    kh = np.full((Hkv, cap, d + pad), np.nan, np.float32)
    vh = np.full((Hkv, cap, d + pad), np.nan, np.float32)
    kh[:, :, :d] = kc.transpose(1, 0, 2)
    vh[:, :, :d] = vc.transpose(1, 0, 2)
    k_view = mb.Tensor(kh[:, :, :d]).transpose(0, 1)  # [cap, Hkv, d], strides ((d+pad), cap·(d+pad), 1)
    v_view = mb.Tensor(vh[:, :, :d]).transpose(0, 1)
    assert not k_view.is_contiguous()
    return k_view, v_view, slot_pos, kc, vc


def query_positions(T, S):
    """The last T of the S positions (a prefill chunk or decode step); 0..T-1 when T > S."""
    return (np.arange(T) + max(S - T, 0)).astype(np.int32)


def block_case():
    """12 tokens, one image block at positions 2..9, window 3. Query 9 and key 2 share the block but
    are outside the window: allowed under the unified rule only. Query 3 and key 6 share the block,
    key ahead of the query but inside the window: allowed under both rules."""
    T = 12
    pos = np.arange(T, dtype=np.int32)
    blocks = np.full(T, -1, np.int32)
    blocks[2:10] = 0
    return pos, blocks


def run_both(device, args, shape, **kw):
    """(output on `device`, reference output) of ops.attention(*args, **kw), each written into a guarded buffer."""
    fast = run_guarded(lambda out: ops.attention(*args, out=out, device=device, **kw), shape, "f32", f"attention {device}")
    ref = run_guarded(lambda out: ops.attention(*args, out=out, reference=True, **kw), shape, "f32", "attention reference")
    return fast.numpy().copy(), ref.numpy().copy()


def check(fast, ref, v, what, device, want=None):
    """fast (from `device`) against the reference output, and first, when `want` (the numpy formula) is
    given, the reference against it: within RTOL·|expected| + ATOL·max|v| (finite values of v)."""
    v = np.asarray(v)
    vmax = float(np.max(np.abs(np.where(np.isfinite(v), v, 0.0)))) if v.size else 1.0
    # assert_close scales atol by max|expected| (of want if given, else of ref); the bound is ATOL·max|v|.
    expected = ref if want is None else want
    atol = ATOL * vmax / max(float(np.max(np.abs(expected))) if expected.size else 0.0, 1e-30)
    if want is not None:
        assert_close(ref, want, rtol=RTOL, atol=atol, what=f"{what}: reference vs numpy")
    assert_close(fast, ref, rtol=RTOL, atol=atol, what=f"{what}: {device} vs reference")
