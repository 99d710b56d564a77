"""Parity tests for ops.attention (fast kernel vs reference kernel vs a float64 numpy formula).

Threshold (f32 storage, f32 math): every output element is a convex combination of value rows, so an
error δ in the logits moves it by at most ≈ max|v|·max|δ|, and the f32 weighted sum adds ~log2(S)·2^-24
relative of max|v|. Inputs are drawn like RMS-normalised q/k (logits of O(1..10), as in Gemma 4 where
scale = 1): an f32 dot over d ≤ 512 then errs by well under 1e-6 absolute, so
    |got − want| ≤ RTOL·|want| + ATOL·max|v|,   RTOL = 1e-5, ATOL = 1e-5
leaves ~10× headroom over the observed errors while still catching a wrong key, head or weight
(those move outputs by O(max|v|/S) ≥ 1e-3 here).
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import rng
from references.attention import (ATOL, RTOL, block_case, check, make_cache, mask_np, parity_grid, qkv,
                                  query_positions, run_both)


# ---------------------------------------------------------------------------------------------------
# float64 numpy reference, written from the formula in the op's contract


def attention_np(q, k, v, q_pos, k_pos, q_block=None, k_block=None, scale=1.0, softcap=0.0, causal=True,
                 window=0, block_overrides_window=False):
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    T, Hq, d = q.shape
    S, Hkv, _ = k.shape
    allowed = mask_np(q_pos, k_pos, q_block, k_block, causal, window, block_overrides_window)  # [T, S]
    # Empty slots may hold garbage (NaN); they are never attended, so drop it before the products.
    empty = (np.asarray(k_pos) < 0)[:, None, None]
    k = np.where(empty, 0.0, k)
    v = np.where(empty, 0.0, v)
    # GQA: query head h reads kv head h // (Hq / Hkv).
    kh = np.repeat(k, Hq // Hkv, axis=1)
    vh = np.repeat(v, Hq // Hkv, axis=1)
    logits = np.einsum("thd,shd->hts", q, kh) * float(np.float32(scale))
    if softcap:
        cap = float(np.float32(softcap))
        logits = cap * np.tanh(logits / cap)
    logits = np.where(allowed[None], logits, -np.inf)
    any_key = allowed.any(axis=1)  # [T]
    mx = np.where(any_key[None, :, None], logits.max(axis=2, keepdims=True, initial=-np.inf), 0.0)
    e = np.where(allowed[None], np.exp(logits - mx), 0.0)
    w = e / np.maximum(e.sum(axis=2, keepdims=True), 1e-300)
    return np.einsum("hts,shd->thd", w, vh)  # rows without keys: all weights 0 → zeros


# ---------------------------------------------------------------------------------------------------
# parity grid: every head dim, head layout, T, S, mask kind and cache layout appears (not the full product)

TS = [1, 3, 33]
SS = [1, 31, 257]


def parity_case(device, seed, d, heads, T, S, mask, layout, what):
    """The last T of S positions as queries over a cache of all S keys in `layout`: the device against the
    reference kernel and the float64 formula."""
    Hq, Hkv = heads
    r = rng(seed)
    q, k, v = qkv(r, T, Hq, S, Hkv, d)
    k_arg, v_arg, k_pos, k_np, v_np = make_cache(r, k, v, layout)
    q_pos = query_positions(T, S)
    fast, ref = run_both(device, (q, k_arg, v_arg, q_pos, k_pos), (T, Hq, d), **mask)
    want = attention_np(q, k_np, v_np, q_pos, k_pos, **mask)
    check(fast, ref, v, f"{what} d={d} heads={heads} T={T} S={S} {mask} {layout}", device, want=want)


@pytest.mark.parametrize("d,heads,T,S,mask,layout", parity_grid(TS, SS))
def test_attention_parity(d, heads, T, S, mask, layout, device):
    parity_case(device, d * 1000 + T * 10 + S, d, heads, T, S, mask, layout, "grid")


@pytest.mark.parametrize("layout", ["linear", "ring", "headmajor"])
@pytest.mark.parametrize("window", [0, 8])
def test_long_decode_split_keys(layout, window, device):
    """T = 1, one head, S = 4097: the fast kernel splits the key axis and merges partials. With a window
    of 8 in a permuted ring most key chunks have no allowed key (empty partials in the merge)."""
    T, Hq, Hkv, S, d = 1, 1, 1, 4097, 128
    r = rng(4097 + window)
    q, k, v = qkv(r, T, Hq, S, Hkv, d)
    k_arg, v_arg, k_pos, k_np, v_np = make_cache(r, k, v, layout)
    q_pos = np.array([S - 1], np.int32)
    fast, ref = run_both(device, (q, k_arg, v_arg, q_pos, k_pos), (T, Hq, d), window=window)
    want = attention_np(q, k_np, v_np, q_pos, k_pos, window=window)
    check(fast, ref, v, f"long decode {layout} window={window}", device, want=want)


@pytest.mark.parametrize("d,heads,T,S", [(1, (6, 2), 3, 31), (13, (7, 1), 5, 257), (100, (7, 1), 2, 300),
                                        (200, (6, 1), 3, 65), (37, (1, 1), 1, 4097)])
def test_odd_head_dims(d, heads, T, S, device):
    """Head dims that are not a multiple of the SIMD width (scalar tails), and 3, 6 or 7 query heads per
    kv head (every mix of the 4-, 2- and 1-head blocks of the grouped kernels)."""
    Hq, Hkv = heads
    r = rng(d)
    q, k, v = qkv(r, T, Hq, S, Hkv, d)
    k_arg, v_arg, k_pos, k_np, v_np = make_cache(r, k, v, "ring")
    q_pos = query_positions(T, S)
    fast, ref = run_both(device, (q, k_arg, v_arg, q_pos, k_pos), (T, Hq, d), window=40)
    want = attention_np(q, k_np, v_np, q_pos, k_pos, window=40)
    check(fast, ref, v, f"odd d={d} heads={heads}", device, want=want)


def test_decode_gqa_sliding_ring(device):
    """A sliding-window layer's decode step as the model will run it: ring of W−1 cached keys plus the
    new one (W keys incl. self), older positions overwritten, Hq = 8 over Hkv = 2, d = 256."""
    W, d, Hq, Hkv = 16, 256, 8, 2
    r = rng(16)
    pos = 100  # the new token's position; cached keys are positions pos−W+1 .. pos (ring slot = pos % W)
    k_pos = np.full(W, -1, np.int32)
    for p in range(pos - W + 1, pos + 1):
        k_pos[p % W] = p
    q, k, v = qkv(r, 1, Hq, W, Hkv, d)
    q_pos = np.array([pos], np.int32)
    fast, ref = run_both(device, (q, k, v, q_pos, k_pos), (1, Hq, d), window=W)
    want = attention_np(q, k, v, q_pos, k_pos, window=W)
    check(fast, ref, v, "sliding ring decode", device, want=want)
    # Sanity of the numpy mask itself: exactly W keys are visible (including self).
    assert mask_np(q_pos, k_pos, None, None, True, W, False).sum() == W


PORTABLE_CHECK = r"""
import sys
import numpy as np
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/.."]  # tests/ops (this file) and tests/ (parity, references)
from markbase._core import ops
from parity import rng
from references.attention import make_cache, qkv, query_positions
from test_attention import attention_np
assert ops._attention_simd() == "portable", ops._attention_simd()
for d, (Hq, Hkv), T, S in [(72, (7, 1), 3, 257), (13, (6, 2), 2, 31), (256, (8, 2), 1, 600)]:
    r = rng(d)
    q, k, v = qkv(r, T, Hq, S, Hkv, d)
    k_arg, v_arg, k_pos, k_np, v_np = make_cache(r, k, v, "ring")
    q_pos = query_positions(T, S)
    fast = ops.attention(q, k_arg, v_arg, q_pos, k_pos, window=100).numpy()
    want = attention_np(q, k_np, v_np, q_pos, k_pos, window=100)
    np.testing.assert_allclose(fast, want, rtol=1e-5, atol=1e-5 * np.abs(v).max())
print("ok")
"""


def test_portable_inner_loops():
    """The non-AVX2 fallback (used on ARM), forced on this machine in a fresh process."""
    env = dict(os.environ, MARKBASE_ATTENTION_SIMD="portable")
    here = os.path.dirname(os.path.abspath(__file__))
    res = subprocess.run([sys.executable, "-c", PORTABLE_CHECK, here], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stdout + res.stderr


# ---------------------------------------------------------------------------------------------------
# prefill chunks: from 32 queries on, the CPU runs masked problems as two GEMMs per (kv head, block of
# queries) over the keys the block sees (backend/cpu/attention_gemm.cpp)

PREFILL_CASES = [  # d, (Hq, Hkv), T, cached keys before the chunk, mask, layout
    (256, (8, 1), 256, 256, dict(causal=True, window=512), "linear"),  # E2B's second 256-row chunk
    (512, (8, 1), 100, 0, dict(causal=True), "ring"),
    (64, (8, 2), 200, 37, dict(causal=True, window=61), "ring"),
    (72, (4, 4), 33, 300, dict(causal=True, softcap=1.5, scale=0.37), "headmajor"),
    (128, (6, 2), 96, 5, dict(causal=False, window=20), "headmajor"),
    (13, (7, 1), 40, 9, dict(causal=True, window=7), "linear"),
]


@pytest.mark.parametrize("d,heads,T,cached,mask,layout", PREFILL_CASES)
def test_prefill_chunk_parity(d, heads, T, cached, mask, layout, device):
    """A chunk of T queries at positions cached..cached+T−1 over the cache holding every earlier key and
    its own (in ring / head-major layouts: permuted slots, NaN-filled empty slots)."""
    parity_case(device, d + T + cached, d, heads, T, cached + T, mask, layout, "prefill chunk")


def test_prefill_chunk_rows_without_keys(device):
    """40 queries, the first 10 placed before every key (causal: they see nothing → zero rows), a window
    of 6 leaving the rest a few keys each; the keys of a block are then not consecutive slots."""
    d, Hq, Hkv, T, S = 64, 4, 2, 40, 50
    r = rng(40)
    q, k, v = qkv(r, T, Hq, S, Hkv, d)
    k_pos = (np.arange(S) * 2 + 20).astype(np.int32)  # positions 20, 22, ...
    q_pos = np.concatenate([np.arange(10), np.arange(30) * 3 + 21]).astype(np.int32)
    fast, ref = run_both(device, (q, k, v, q_pos, k_pos), (T, Hq, d), window=6)
    np.testing.assert_array_equal(fast[:10], 0.0)
    want = attention_np(q, k, v, q_pos, k_pos, window=6)
    check(fast, ref, v, "prefill rows without keys", device, want=want)


@pytest.mark.parametrize("bad", ["future_v", "future_k", "seen_k", "q_inf"])
def test_prefill_chunk_non_finite(bad, device):
    """Non-finite values in a 64-query causal chunk give NaN exactly where the reference does: a NaN or inf
    in the value (key) row of position 40 reaches the rows of queries 40.. only (a GEMM over the block's
    keys would give the earlier rows of its block 0·NaN), a NaN key seen by every query every row, an
    infinite query entry its own row (e^(inf − inf))."""
    d, Hq, Hkv, T = 64, 4, 1, 64
    r = rng(64)
    q, k, v = qkv(r, T, Hq, T, Hkv, d)
    pos = np.arange(T, dtype=np.int32)
    if bad == "future_v":
        v[40, 0, 3] = np.inf
    elif bad == "future_k":
        k[40, 0, 5] = np.nan
    elif bad == "seen_k":
        k[0, 0, 5] = np.nan
    else:
        q[7, 2, 1] = np.inf
    fast, ref = run_both(device, (q, k, v, pos, pos), (T, Hq, d))
    bad_ref, bad_fast = ~np.isfinite(ref), ~np.isfinite(fast)
    assert bad_ref.any(), "the case must poison some rows"
    np.testing.assert_array_equal(bad_fast, bad_ref, err_msg=f"{bad}: non-finite pattern differs from reference")
    ok = ~bad_ref
    np.testing.assert_allclose(fast[ok], ref[ok], rtol=RTOL, atol=ATOL * np.abs(v[np.isfinite(v)]).max())


def test_prefill_chunk_blocks(device):
    """A 48-token prefill with two image blocks (bidirectional inside each) under both block rules."""
    d, Hq, Hkv, T = 64, 8, 2, 48
    pos = np.arange(T, dtype=np.int32)
    blocks = np.full(T, -1, np.int32)
    blocks[5:21], blocks[30:44] = 0, 1
    r = rng(48)
    q, k, v = qkv(r, T, Hq, T, Hkv, d)
    for rule in (False, True):
        kw = dict(q_block=blocks, k_block=blocks, window=9, block_overrides_window=rule)
        fast, ref = run_both(device, (q, k, v, pos, pos), q.shape, **kw)
        want = attention_np(q, k, v, pos, pos, blocks, blocks, window=9, block_overrides_window=rule)
        check(fast, ref, v, f"prefill blocks unified={rule}", device, want=want)


# ---------------------------------------------------------------------------------------------------
# bidirectional blocks


@pytest.mark.parametrize("d,heads", [(72, (4, 4)), (256, (8, 2))])
def test_blocks_both_rules(d, heads, device):
    Hq, Hkv = heads
    pos, blocks = block_case()
    W = 3
    m_g4 = mask_np(pos, pos, blocks, blocks, True, W, False)
    m_uni = mask_np(pos, pos, blocks, blocks, True, W, True)
    assert not m_g4[9, 2] and m_uni[9, 2]  # the rules differ here
    assert m_g4[3, 5] and m_uni[3, 5]      # in-block key ahead of the query, inside the window
    assert not m_g4[1, 2] and not m_uni[1, 2]  # a text query does not see the block's future
    r = rng(d)
    q, k, v = qkv(r, len(pos), Hq, len(pos), Hkv, d)
    outs = {}
    for rule in (False, True):
        kw = dict(q_block=blocks, k_block=blocks, window=W, block_overrides_window=rule)
        fast, ref = run_both(device, (q, k, v, pos, pos), q.shape, **kw)
        want = attention_np(q, k, v, pos, pos, blocks, blocks, window=W, block_overrides_window=rule)
        check(fast, ref, v, f"blocks unified={rule}", device, want=want)
        outs[rule] = fast
    # The two rules give different rows where the masks differ, identical rows elsewhere.
    differ = (m_g4 != m_uni).any(axis=1)
    assert differ.any()
    assert np.abs(outs[False][differ] - outs[True][differ]).max() > 1e-3
    np.testing.assert_array_equal(outs[False][~differ], outs[True][~differ])


def test_blocks_non_causal_unlimited_window(device):
    """Blocks with window 0 and the block ids in a permuted ring layout (bidirectional prefill rows)."""
    d, Hq, Hkv, S = 64, 8, 1, 31
    r = rng(31)
    q, k, v = qkv(r, S, Hq, S, Hkv, d)
    k_arg, v_arg, k_pos, k_np, v_np = make_cache(r, k, v, "ring")
    q_pos = np.arange(S, dtype=np.int32)
    q_block = np.where((q_pos >= 5) & (q_pos < 20), 1, np.where(q_pos >= 25, 2, -1)).astype(np.int32)
    k_block = np.where(k_pos >= 0, q_block[np.clip(k_pos, 0, None)], 7).astype(np.int32)  # empty slots: any id
    for rule in (False, True):
        kw = dict(q_block=q_block, k_block=k_block, block_overrides_window=rule)
        fast, ref = run_both(device, (q, k_arg, v_arg, q_pos, k_pos), q.shape, **kw)
        want = attention_np(q, k_np, v_np, q_pos, k_pos, q_block, k_block, block_overrides_window=rule)
        check(fast, ref, v, f"blocks window=0 unified={rule}", device, want=want)


# ---------------------------------------------------------------------------------------------------
# rows without keys, NaN


@pytest.mark.parametrize("S", [1, 31, 257])
def test_rows_without_allowed_keys_are_zero(S, device):
    """Query 0 sits before every key (causal → nothing), query 1 sees keys; all-empty caches give zeros;
    every masked slot holds NaN, so a kernel that reads a masked key or divides 0/0 fails."""
    d, Hq, Hkv = 72, 4, 4
    r = rng(S)
    q, k, v = qkv(r, 2, Hq, S, Hkv, d)
    k_pos = (np.arange(S) + 10).astype(np.int32)
    q_pos = np.array([3, 10 + S // 2], np.int32)
    k[k_pos > q_pos[1]] = np.nan
    v[k_pos > q_pos[1]] = np.nan
    fast, ref = run_both(device, (q, k, v, q_pos, k_pos), (2, Hq, d))
    for out in (fast, ref):
        np.testing.assert_array_equal(out[0], 0.0)
    # The numpy formula multiplies masked rows by weight 0, so it gets the NaN-free values.
    want = attention_np(q, np.nan_to_num(k), np.nan_to_num(v), q_pos, k_pos)
    check(fast, ref, np.nan_to_num(v), "no allowed key", device, want=want)
    # Every slot empty.
    empty = np.full(S, -1, np.int32)
    kn = np.full_like(k, np.nan)
    fast, ref = run_both(device, (q, kn, kn, q_pos, empty), (2, Hq, d))
    np.testing.assert_array_equal(fast, 0.0)
    np.testing.assert_array_equal(ref, 0.0)


def test_no_keys_at_all(device):
    q = np.ones((2, 2, 64), np.float32)
    kv = np.zeros((0, 1, 64), np.float32)
    for reference in (False, True):
        out = ops.attention(q, kv, kv, np.array([0, 1], np.int32), np.zeros(0, np.int32), device=device,
                            reference=reference)
        np.testing.assert_array_equal(out.numpy(), 0.0)


def test_nan_propagates(device):
    d, S = 64, 300
    r = rng(5)
    q, k, v = qkv(r, 1, 1, S, 1, d)
    q_pos, k_pos = np.array([S - 1], np.int32), np.arange(S, dtype=np.int32)
    for bad in ("q", "k", "v"):
        qq, kk, vv = q.copy(), k.copy(), v.copy()
        if bad == "q":
            qq[0, 0, 3] = np.nan
        else:  # one element of an allowed key / value row
            (kk if bad == "k" else vv)[S // 2, 0, 5] = np.nan
        for reference in (False, True):
            out = ops.attention(qq, kk, vv, q_pos, k_pos, device=device, reference=reference).numpy()
            assert np.isnan(out).any(), f"NaN in {bad} was hidden (reference={reference})"


# ---------------------------------------------------------------------------------------------------
# bad input

F = np.float32


def _good():
    return dict(q=np.zeros((3, 4, 64), F), k=np.zeros((5, 2, 64), F), v=np.zeros((5, 2, 64), F),
                q_pos=np.arange(3, dtype=np.int32), k_pos=np.arange(5, dtype=np.int32))


def _call(**over):
    a = _good()
    kw = {n: over.pop(n) for n in list(over) if n not in a}
    a.update(over)
    return ops.attention(a["q"], a["k"], a["v"], a["q_pos"], a["k_pos"], **kw)


@pytest.mark.parametrize("over,operand", [
    (dict(k=np.zeros((5, 2, 72), F)), "k"),
    (dict(v=np.zeros((5, 2, 72), F)), "v"),
    (dict(v=np.zeros((6, 2, 64), F)), "v"),
    (dict(q=np.zeros((3, 3, 64), F)), "q"),  # 3 query heads over 2 kv heads
    (dict(q_pos=np.arange(4, dtype=np.int32)), "q_pos"),
    (dict(k_pos=np.arange(4, dtype=np.int32)), "k_pos"),
    (dict(q=np.zeros((3, 4, 64), np.float16)), "q"),
    (dict(k=mb.Tensor(np.zeros((5, 2, 64), F), dtype="bf16")), "k"),
    (dict(v=np.zeros((5, 2, 64), np.int32)), "v"),
    (dict(q_pos=np.arange(3, dtype=np.int64)), "q_pos"),
    (dict(k_pos=np.arange(5, dtype=F)), "k_pos"),
    (dict(k=np.zeros((5, 2, 128), F)[:, :, ::2]), "k"),  # non-contiguous last dim
    (dict(v=np.zeros((5, 2, 128), F)[:, :, ::2]), "v"),
    (dict(q=np.zeros((3, 4, 64), F)[::-1]), "q"),  # q must be contiguous
    (dict(q=np.zeros((3, 256), F)), "q"),
    (dict(q_block=np.zeros(3, np.int32)), "k_block"),
    (dict(q_block=np.zeros(3, np.int32), k_block=np.zeros(4, np.int32)), "k_block"),
    (dict(q_block=np.zeros(3, F), k_block=np.zeros(5, np.int32)), "q_block"),
    (dict(window=-1), "window"),
    (dict(softcap=-1.0), "softcap"),
    (dict(scale=float("inf")), "scale"),
    (dict(out=np.zeros((3, 4, 32), F)), "out"),
])
def test_bad_input(over, operand):
    with pytest.raises(mb.InputError, match=rf"^attention: .*\b{operand}\b"):
        _call(**over)


def test_out_aliasing_inputs_rejected():
    a = _good()
    qt = mb.Tensor(a["q"])
    with pytest.raises(mb.InputError, match=r"^attention: out overlaps input q\b"):
        ops.attention(qt, a["k"], a["v"], a["q_pos"], a["k_pos"], out=qt)
    for name in ("k", "v"):
        # out shares memory with the tail of k / v.
        buf = np.zeros(5 * 2 * 64 + 3 * 4 * 64, F)
        b = _good()
        b[name] = buf[: 5 * 2 * 64].reshape(5, 2, 64)
        out = buf[64: 64 + 3 * 4 * 64].reshape(3, 4, 64)
        with pytest.raises(mb.InputError, match=rf"^attention: out overlaps input {name}\b"):
            ops.attention(b["q"], b["k"], b["v"], b["q_pos"], b["k_pos"], out=out)
