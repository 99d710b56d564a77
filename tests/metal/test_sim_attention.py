"""Attention on metal-sim: the Metal kernels (metal/attention.metal: decode + merge for T <= 4, prefill for
T > 4) against the CPU scalar reference, with the thresholds of tests/ops/test_attention.py:
    |sim − ref| <= RTOL·|ref| + ATOL·max|v|,   RTOL = ATOL = 1e-5
(outputs are convex combinations of value rows; see that file's docstring for the derivation).
The general grid (every head dim 64..512, GQA groups, mask kinds, ring caches with empty (NaN-filled) slots,
a head-major transposed cache view, both block rules, the sliding-ring decode step) runs in
tests/ops/test_attention.py on every device, metal-sim included. This file keeps the Metal-specific cases:
the grid at a prefill T = 13 and at S = 150 (2 decode key chunks), every mask on both kernels, split-KV decode
with 2 query heads, long prefill tiles, odd head dims up to 300, reversed k / v, blocks on the decode kernel,
rows with no allowed key, NaN propagation and the 512 head-dim limit."""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import rng, run_guarded
from references.attention import (MASKS, block_case, check, make_cache, mask_np, parity_grid, qkv, query_positions,
                                  run_both)

from .sim import require_sim

DEVICE = "metal-sim"


def compare(q, k_arg, v_arg, q_pos, k_pos, v_np, what, **kw):
    """metal-sim against the CPU reference (references/attention.py: run_both, check)."""
    require_sim()
    sim, ref = run_both(DEVICE, (q, k_arg, v_arg, q_pos, k_pos), q.shape, **kw)
    check(sim, ref, v_np, what, DEVICE)
    return sim, ref


# ---------------------------------------------------------------------------------------------------
# parity grid: every head dim, head layout, T (decode 1, 3; prefill 13), S (150 keys: 2 decode chunks),
# mask kind and cache layout appears (not the full product). The cases with T ∈ {1, 3} and S ∈ {1, 31} are
# the same (same parameters and seeds) as tests/ops/test_attention.py's grid, which runs on every device,
# metal-sim included; only those with the Metal-specific T = 13 or S = 150 stay here.

TS = [1, 3, 13]
SS = [1, 31, 150]
SIM_GRID = [p for p in parity_grid(TS, SS) if p.values[2] == 13 or p.values[3] == 150]


@pytest.mark.parametrize("d,heads,T,S,mask,layout", SIM_GRID)
def test_attention_parity(d, heads, T, S, mask, layout):
    Hq, Hkv = heads
    r = rng(d * 1000 + T * 10 + S)
    q, k, v = qkv(r, T, Hq, S, Hkv, d)
    k_arg, v_arg, k_pos, _, _ = make_cache(r, k, v, layout)
    compare(q, k_arg, v_arg, query_positions(T, S), k_pos, v, f"d={d} heads={heads} T={T} S={S} {mask} {layout}",
            **mask)


@pytest.mark.parametrize("mask", MASKS, ids=[f"m{i}" for i in range(len(MASKS))])
@pytest.mark.parametrize("T", [2, 9])
def test_every_mask_on_both_kernels(T, mask):
    """Each mask kind through the decode kernel (T = 2, 2 key chunks) and the prefill kernel (T = 9)."""
    d, Hq, Hkv, S = 128, 4, 2, 200
    r = rng(T * 100 + len(mask))
    q, k, v = qkv(r, T, Hq, S, Hkv, d)
    k_arg, v_arg, k_pos, _, _ = make_cache(r, k, v, "ring")
    compare(q, k_arg, v_arg, query_positions(T, S), k_pos, v, f"T={T} {mask}", **mask)


@pytest.mark.parametrize("layout", ["linear", "ring", "headmajor"])
@pytest.mark.parametrize("window", [0, 8])
def test_long_decode_split_keys(layout, window):
    """T = 1, S = 4097 (ring: 5123 slots): 33–41 key chunks merged by attention_merge_f32. With a window of
    8 in a permuted ring most chunks have no allowed key (empty partials in the merge)."""
    T, Hq, Hkv, S, d = 1, 2, 1, 4097, 128
    r = rng(4097 + window)
    q, k, v = qkv(r, T, Hq, S, Hkv, d)
    k_arg, v_arg, k_pos, _, _ = make_cache(r, k, v, layout)
    compare(q, k_arg, v_arg, np.array([S - 1], np.int32), k_pos, v, f"long decode {layout} window={window}",
            window=window)


def test_prefill_long_keys_several_tiles():
    """Prefill over a ring of 600 keys at d = 512 (7-key tiles: ~100 tiles) with GQA 4 over 1."""
    T, Hq, Hkv, S, d = 6, 4, 1, 600, 512
    r = rng(600)
    q, k, v = qkv(r, T, Hq, S, Hkv, d)
    k_arg, v_arg, k_pos, _, _ = make_cache(r, k, v, "ring")
    compare(q, k_arg, v_arg, query_positions(T, S), k_pos, v, "prefill d=512 S=600", window=40)


@pytest.mark.parametrize("d,heads,T,S", [(13, (7, 1), 5, 100), (200, (6, 1), 6, 65), (37, (1, 1), 1, 700),
                                        (300, (3, 1), 7, 40)])
def test_odd_head_dims(d, heads, T, S):
    """Head dims that are not a multiple of 32 (idle lanes) and 3, 6 or 7 query heads per kv head (rows of
    a prefill threadgroup spanning queries). (1, (6, 2), 3, 31) and (100, (7, 1), 2, 300) run in
    tests/ops/test_attention.py on every device."""
    Hq, Hkv = heads
    r = rng(d)
    q, k, v = qkv(r, T, Hq, S, Hkv, d)
    k_arg, v_arg, k_pos, _, _ = make_cache(r, k, v, "ring")
    compare(q, k_arg, v_arg, query_positions(T, S), k_pos, v, f"odd d={d} heads={heads}", window=40)


def test_negative_strides_and_huge_window():
    """k / v passed as reversed views (negative outer stride) and a window of 2^40 (= unlimited)."""
    T, Hq, Hkv, S, d = 2, 2, 2, 40, 64
    r = rng(40)
    q, k, v = qkv(r, T, Hq, S, Hkv, d)
    k_pos = np.arange(S, dtype=np.int32)[::-1].copy()
    kr, vr = k[::-1], v[::-1]
    assert kr.strides[0] < 0
    q_pos = query_positions(T, S)
    sim, _ = compare(q, kr, vr, q_pos, k_pos, v, "reversed k/v, window 2^40", window=1 << 40)
    unlimited, _ = compare(q, kr, vr, q_pos, k_pos, v, "reversed k/v")
    np.testing.assert_array_equal(sim, unlimited)


# ---------------------------------------------------------------------------------------------------
# bidirectional blocks


@pytest.mark.parametrize("d,heads,rows", [(128, (4, 2), "decode")])
def test_blocks_both_rules(d, heads, rows):
    """Both block rules on the decode kernel (the 3 queries 3, 9, 1). All 12 queries (prefill) at d = 72 and
    256 run in tests/ops/test_attention.py on every device."""
    Hq, Hkv = heads
    pos, blocks = block_case()
    W = 3
    qi = np.arange(12) if rows == "all" else np.array([3, 9, 1])
    m_g4 = mask_np(pos[qi], pos, blocks[qi], blocks, True, W, False)
    m_uni = mask_np(pos[qi], pos, blocks[qi], blocks, True, W, True)
    differ = (m_g4 != m_uni).any(axis=1)
    assert differ.any()  # query 9 sees key 2 under the unified rule only
    r = rng(d)
    q, k, v = qkv(r, len(qi), Hq, 12, Hkv, d)
    outs = {}
    for rule in (False, True):
        kw = dict(q_block=blocks[qi].copy(), k_block=blocks, window=W, block_overrides_window=rule)
        outs[rule], _ = compare(q, k, v, pos[qi].copy(), pos, v, f"blocks {rows} unified={rule}", **kw)
    assert np.abs(outs[False][differ] - outs[True][differ]).max() > 1e-3
    np.testing.assert_array_equal(outs[False][~differ], outs[True][~differ])


@pytest.mark.parametrize("T", [2])
def test_blocks_non_causal_unlimited_window(T):
    """Blocks with window 0 and the block ids in a permuted ring layout (empty slots carry any id), on the
    decode kernel (T = 2); T = 31 (prefill) runs in tests/ops/test_attention.py on every device."""
    d, Hq, Hkv, S = 64, 8, 1, 31
    r = rng(31)
    q, k, v = qkv(r, T, Hq, S, Hkv, d)
    k_arg, v_arg, k_pos, _, _ = make_cache(r, k, v, "ring")
    all_pos = np.arange(S, dtype=np.int32)
    all_block = np.where((all_pos >= 5) & (all_pos < 20), 1, np.where(all_pos >= 25, 2, -1)).astype(np.int32)
    q_pos = all_pos[[7, 26]] if T == 2 else all_pos
    q_block = all_block[q_pos]
    k_block = np.where(k_pos >= 0, all_block[np.clip(k_pos, 0, None)], 7).astype(np.int32)
    for rule in (False, True):
        compare(q, k_arg, v_arg, q_pos, k_pos, v, f"blocks window=0 T={T} unified={rule}", q_block=q_block,
                k_block=k_block, block_overrides_window=rule)


# ---------------------------------------------------------------------------------------------------
# rows without keys, NaN, limits


@pytest.mark.parametrize("T", [2, 6])
@pytest.mark.parametrize("S", [1, 31, 257])
def test_rows_without_allowed_keys_are_zero(S, T):
    """Query 0 sits before every key (causal → nothing); the others see keys; every key no query may see
    holds NaN (a kernel that reads a masked key or divides 0/0 fails); then an all-empty cache."""
    require_sim()
    d, Hq, Hkv = 72, 4, 4
    r = rng(S + T)
    q, k, v = qkv(r, T, Hq, S, Hkv, d)
    k_pos = (np.arange(S) + 10).astype(np.int32)
    q_pos = np.concatenate([[3], 10 + (np.arange(1, T) * S) // (2 * T)]).astype(np.int32)
    hidden = k_pos > q_pos.max()
    k[hidden] = np.nan
    v[hidden] = np.nan
    sim, ref = run_both(DEVICE, (q, k, v, q_pos, k_pos), (T, Hq, d))
    np.testing.assert_array_equal(sim[0], 0.0)
    check(sim, ref, v, f"no allowed key T={T} S={S}", DEVICE)
    empty = np.full(S, -1, np.int32)
    kn = np.full_like(k, np.nan)
    sim, ref = run_both(DEVICE, (q, kn, kn, q_pos, empty), (T, Hq, d))
    np.testing.assert_array_equal(sim, 0.0)
    np.testing.assert_array_equal(ref, 0.0)


@pytest.mark.parametrize("T", [2, 6])
def test_no_keys_at_all(T):
    require_sim()
    q = np.ones((T, 2, 64), np.float32)
    kv = np.zeros((0, 1, 64), np.float32)
    out = run_guarded(lambda o: ops.attention(q, kv, kv, np.arange(T, dtype=np.int32), np.zeros(0, np.int32), out=o,
                                              device=DEVICE), q.shape, "f32", "no keys")
    np.testing.assert_array_equal(out.numpy(), 0.0)


def test_no_queries():
    require_sim()
    out = ops.attention(np.zeros((0, 2, 64), np.float32), np.ones((3, 1, 64), np.float32),
                        np.ones((3, 1, 64), np.float32), np.zeros(0, np.int32), np.arange(3, dtype=np.int32),
                        device=DEVICE)
    assert out.numpy().shape == (0, 2, 64)


@pytest.mark.parametrize("T,S", [(1, 300), (6, 40)])
def test_nan_propagates(T, S):
    """A NaN in q, or in one element of an allowed key / value row, reaches the output (decode with
    3 chunks; prefill)."""
    require_sim()
    d = 64
    r = rng(5)
    q, k, v = qkv(r, T, 1, S, 1, d)
    q_pos, k_pos = query_positions(T, S), np.arange(S, dtype=np.int32)
    for bad in ("q", "k", "v"):
        qq, kk, vv = q.copy(), k.copy(), v.copy()
        if bad == "q":
            qq[T - 1, 0, 3] = np.nan
        else:
            (kk if bad == "k" else vv)[S // 2, 0, 5] = np.nan
        out = ops.attention(qq, kk, vv, q_pos, k_pos, device=DEVICE).numpy()
        assert np.isnan(out[T - 1]).any(), f"NaN in {bad} was hidden"


def test_head_dim_above_512_is_a_device_error():
    require_sim()
    q = np.zeros((1, 1, 520), np.float32)
    kv = np.zeros((2, 1, 520), np.float32)
    with pytest.raises(mb.DeviceError, match="attention: .*head dims up to 512"):
        ops.attention(q, kv, kv, np.array([1], np.int32), np.arange(2, dtype=np.int32), device=DEVICE)


def test_bad_input_is_still_an_input_error():
    require_sim()
    q = np.zeros((3, 4, 64), np.float32)
    kv = np.zeros((5, 2, 72), np.float32)
    with pytest.raises(mb.InputError, match=r"^attention: .*\bk\b"):
        ops.attention(q, kv, kv, np.arange(3, dtype=np.int32), np.arange(5, dtype=np.int32), device=DEVICE)
