"""Affine-quantized weights (ops/quant.h): the quantizer against a float32 numpy port of MLX's algorithm
(bit for bit: packed values, scales, biases), the dequantization error bound, and linear_quantized /
embedding_quantized on every device against the scalar reference and a float64 numpy product of the
dequantized matrix.

Threshold for the products: every weight is s·q + b; the kernels sum in f32 in different orders (per
group s·Σq·x + b·Σx in the fast ones, dequantize-then-dot in the reference), so with S = Σ_k |x_k|·(|s·q| +
|b|) per output, |got − want| ≤ 8·sqrt(K + 1)·2^-24·S — far below one wrong value of q (which moves an
output by |s·x_k| ≳ 1e-3·S/K here) or a wrong group's scale.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import rng, round_to, to_f64

U32 = 2.0**-24


def mlx_quantize_np(w, bits, group_size):
    """mlx.core.quantize (CPU kernel) in float32 numpy: (q [R, C] ints, scale [R, G], bias [R, G]) before packing."""
    w = np.asarray(w, np.float32)
    R, C = w.shape
    g = w.reshape(R, C // group_size, group_size)
    n_bins, eps = np.float32((1 << bits) - 1), np.float32(1e-7)
    lo, hi = g.min(-1), g.max(-1)
    mask = np.abs(lo) > np.abs(hi)
    scale = np.maximum((hi - lo) / n_bins, eps).astype(np.float32)
    scale = np.where(mask, scale, -scale).astype(np.float32)
    edge = np.where(mask, lo, hi).astype(np.float32)
    q0 = np.rint(edge / scale).astype(np.float32)
    nz = q0 != 0
    scale = np.where(nz, edge / np.where(nz, q0, 1), scale).astype(np.float32)
    bias = np.where(nz, edge, np.float32(0)).astype(np.float32)
    q = np.clip(np.rint((g - bias[..., None]) / scale[..., None]), 0, n_bins).astype(np.uint8)
    return q.reshape(R, C), scale, bias


def pack_np(q, bits):
    if bits == 8:
        return q.astype(np.uint8)
    return (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8)


def as_np(t, dtype):
    """An mb.Tensor of dtype (f32/bf16/f16) as float64 numpy."""
    return to_f64(t)


@pytest.mark.parametrize("sdtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("group_size", [32, 64, 128])
@pytest.mark.parametrize("bits", [4, 8])
def test_quantize_equals_mlx_algorithm(bits, group_size, sdtype):
    r = rng(bits * 1000 + group_size)
    w = (r.normal(size=(37, 256)) * r.uniform(0.01, 3, size=(37, 1))).astype(np.float32)
    w[3, :group_size] = 0.0           # an all-zero group: scale eps, bias 0
    w[4, :group_size] = 0.25          # a constant group
    w[5, :group_size] = -np.abs(w[5, :group_size])  # one-signed groups (the edge is the min / the max)
    w[6, :group_size] = np.abs(w[6, :group_size])
    q, s, b = ops.quantize(w, bits=bits, group_size=group_size, scale_dtype=sdtype)
    wq, ws, wb = mlx_quantize_np(w, bits, group_size)
    np.testing.assert_array_equal(np.asarray(q.numpy()), pack_np(wq, bits))
    np.testing.assert_array_equal(as_np(s, sdtype), round_to(ws, sdtype))
    np.testing.assert_array_equal(as_np(b, sdtype), round_to(wb, sdtype))
    # Dequantized values: the constant / zero groups come back exactly, the rest within 1.5 steps: half a
    # step of rounding, plus up to one step clipped at the far end of the range, because MLX re-derives
    # the step from the heavier extreme (scale = edge / rint(edge / scale)); plus the rounding of scale and
    # bias to their storage dtype.
    d = ops.dequantize(q, s, b, bits=bits, group_size=group_size).numpy()
    assert (d[3, :group_size] == 0).all() and np.allclose(d[4, :group_size], 0.25, rtol=2**-8)
    step = np.repeat(np.abs(round_to(ws, sdtype)), group_size, axis=1)
    slack = {"f32": 1e-6, "bf16": 2**-8, "f16": 2**-10}[sdtype] * (np.abs(w) + step * ((1 << bits) - 1))
    assert (np.abs(d - w) <= 1.5 * step + slack + 1e-6).all()


def unpack_bitstream_np(words, cols, bits):
    """MLX's packed rows (u32 [R, cols·bits/32]) as ints [R, cols]: value c in bits [c·bits, (c+1)·bits) of the
    row's little-endian bit stream (mlx.core's extract_bits, any width), decoded with numpy's unpackbits."""
    stream = np.unpackbits(np.ascontiguousarray(words).view(np.uint8), axis=1, bitorder="little")
    return (stream[:, : cols * bits].reshape(-1, cols, bits).astype(np.int64) << np.arange(bits)).sum(-1)


@pytest.mark.parametrize("group_size", [32, 64, 128])
@pytest.mark.parametrize("bits", [1, 2, 3, 5, 6])
def test_widen_affine_bits_holds_mlx_values(bits, group_size):
    """MLX's other widths (quantized by mlx itself) widened to the kernels' nibbles / bytes: the same integers,
    and dequantized they are mlx.core.dequantize's values (to an f32 rounding: MLX fuses s·q + b)."""
    import mlx.core as mx

    R, C = 7, 3 * 128
    w = rng(bits * 100 + group_size).standard_normal((R, C)).astype(np.float32)
    wq, ws, wb = mx.quantize(mx.array(w), group_size=group_size, bits=bits)
    words, scales, biases = np.array(wq), np.array(ws), np.array(wb)
    assert words.dtype == np.uint32 and words.shape == (R, C * bits // 32)
    held = 4 if bits <= 4 else 8
    got = ops.widen_affine_bits(words.view(np.uint8), cols=C, bits=bits).numpy()
    assert got.shape == (R, C * held // 8)
    want = unpack_bitstream_np(words, C, bits)
    assert want.max() == (1 << bits) - 1  # every width's top value is exercised
    np.testing.assert_array_equal(got, pack_np(want.astype(np.uint8), held))
    deq = ops.dequantize(got, scales, biases, bits=held, group_size=group_size).numpy()
    ref = np.array(mx.dequantize(wq, ws, wb, group_size=group_size, bits=bits))
    np.testing.assert_allclose(deq, ref, rtol=0, atol=2 * U32 * np.abs(ref).max())


def test_widen_affine_bits_rejects_bad_input():
    with pytest.raises(mb.InputError, match="1-6 and 8"):
        ops.widen_affine_bits(np.zeros((2, 14), np.uint8), cols=16, bits=7)
    with pytest.raises(mb.InputError, match="does not hold rows of 64 6-bit values"):
        ops.widen_affine_bits(np.zeros((2, 40), np.uint8), cols=64, bits=6)


def test_quantize_accepts_bf16_and_f16_weights():
    w = rng(1).normal(size=(8, 64)).astype(np.float32)
    for dt in ("bf16", "f16"):
        q, s, b = ops.quantize(mb.Tensor(w, dtype=dt), bits=8, group_size=64, scale_dtype="f32")
        wq, ws, wb = mlx_quantize_np(round_to(w, dt).astype(np.float32), 8, 64)
        np.testing.assert_array_equal(q.numpy(), wq)


def make_case(M, N, K, bits, group_size, sdtype, seed):
    r = rng(seed)
    x = r.normal(size=(M, K)).astype(np.float32)
    w = (r.normal(size=(N, K)) * 0.5).astype(np.float32)
    q, s, b = ops.quantize(w, bits=bits, group_size=group_size, scale_dtype=sdtype)
    deq = ops.dequantize(q, s, b, bits=bits, group_size=group_size).numpy().astype(np.float64)
    s64 = np.repeat(np.abs(as_np(s, sdtype)), group_size, axis=1)
    b64 = np.repeat(np.abs(as_np(b, sdtype)), group_size, axis=1)
    qv = np.abs(deq - np.repeat(as_np(b, sdtype), group_size, axis=1))  # |s·q|
    S = np.abs(x.astype(np.float64)) @ (qv + b64).T
    return x, (q, s, b), deq, S


def check_close(got, want, S, K, what):
    g = to_f64(got)
    assert np.isfinite(g).all(), f"{what}: non-finite output"
    err, limit = np.abs(g - want), 8 * np.sqrt(K + 1) * U32 * S + 1e-30
    if not (err <= limit).all():
        i = np.unravel_index(np.argmax(err - limit), err.shape)
        raise AssertionError(f"{what}: at {i} got {g[i]!r} want {want[i]!r} |err| {err[i]:.3g} > {limit[i]:.3g}")


CASES = [(1, 1, 32), (1, 7, 64), (1, 257, 1536), (2, 64, 256), (3, 33, 128), (4, 100, 384), (5, 64, 256),
         (17, 130, 640), (300, 40, 128)]


FORMATS = [(4, 64), (8, 64), (4, 32), (8, 128)]
GRID = [(M, N, K, bits, g) for (M, N, K) in CASES for (bits, g) in FORMATS if K % g == 0]  # valid matrices only


@pytest.mark.parametrize("sdtype", ["bf16", "f32", "f16"])
@pytest.mark.parametrize("M,N,K,bits,group_size", GRID)
def test_linear_quantized(M, N, K, bits, group_size, sdtype, device):
    x, (q, s, b), deq, S = make_case(M, N, K, bits, group_size, sdtype, seed=M * 31 + N + K + bits)
    what = f"linear_quantized M{M} N{N} K{K} q{bits} g{group_size} {sdtype}"
    want = x.astype(np.float64) @ deq.T
    kw = dict(bits=bits, group_size=group_size)
    fast = ops.linear_quantized(x, q, s, b, device=device, **kw)
    ref = ops.linear_quantized(x, q, s, b, reference=True, **kw)
    check_close(ref, want, S, K, f"{what}: reference")
    check_close(fast, want, S, K, f"{what}: {device}")


@pytest.mark.parametrize("bdtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("M", [1, 6])
def test_linear_quantized_bias(M, bdtype, device):
    N, K = 24, 128
    x, (q, s, b), deq, S = make_case(M, N, K, 4, 64, "bf16", seed=9)
    bias = rng(3).normal(size=N).astype(np.float32)
    bt = mb.Tensor(bias, dtype=bdtype)
    got = ops.linear_quantized(x, q, s, b, bits=4, group_size=64, bias=bt, device=device)
    want = x.astype(np.float64) @ deq.T + round_to(bias, bdtype)
    check_close(got, want, S + np.abs(bias), K, f"bias {bdtype} M{M} {device}")


def test_a_single_wrong_value_is_visible():
    # Sensitivity: flipping one packed nibble changes exactly its output row.
    x, (q, s, b), deq, S = make_case(1, 8, 128, 4, 64, "f32", seed=4)
    base = ops.linear_quantized(x, q, s, b, bits=4, group_size=64).numpy()
    qq = q.numpy().copy()
    qq[5, 10] ^= 0x0F
    moved = ops.linear_quantized(x, mb.Tensor(qq), s, b, bits=4, group_size=64).numpy()
    changed = np.abs(moved - base)[0] > 1e-6
    assert changed.tolist() == [i == 5 for i in range(8)]


@pytest.mark.parametrize("sdtype", ["f32", "bf16"])
@pytest.mark.parametrize("bits", [4, 8])
def test_embedding_quantized(bits, sdtype, device):
    r = rng(bits)
    table = r.normal(size=(50, 192)).astype(np.float32)
    q, s, b = ops.quantize(table, bits=bits, group_size=64, scale_dtype=sdtype)
    deq = ops.dequantize(q, s, b, bits=bits, group_size=64).numpy()
    ids = np.array([0, 49, 7, 7, 23], np.int32)
    got = ops.embedding_quantized(q, s, b, bits=bits, group_size=64, ids=ids, scale=1.5, device=device).numpy()
    np.testing.assert_allclose(got, deq[ids] * np.float32(1.5), rtol=2e-7, atol=0)


@pytest.mark.parametrize("group_size", [32, 128])
@pytest.mark.parametrize("bits", [1, 2, 3, 5, 6])
def test_embedding_quantized_at_mlx_widths(bits, group_size, device):
    """A table mlx quantized at its other widths, gathered straight from its packed words (no widening, as the
    PLE table of an MLX checkpoint is): the rows are mx.dequantize's, times the scale. The last row and column
    are gathered, so a read past a row's K·bits/8 bytes would show under the sanitizer run."""
    import mlx.core as mx

    R, C = 9, 3 * 128
    table = rng(bits * 10 + group_size).standard_normal((R, C)).astype(np.float32)
    wq, ws, wb = mx.quantize(mx.array(table), group_size=group_size, bits=bits)
    words, scales, biases = np.array(wq), np.array(ws), np.array(wb)
    ids = np.array([R - 1, 0, 4, 4, 7], np.int32)
    got = ops.embedding_quantized(words.view(np.uint8), scales, biases, bits=bits, group_size=group_size, ids=ids,
                                  scale=1.5, device=device).numpy()
    ref = np.array(mx.dequantize(wq, ws, wb, group_size=group_size, bits=bits))[ids] * np.float32(1.5)
    assert got.shape == (len(ids), C)
    np.testing.assert_allclose(got, ref, rtol=0, atol=2 * U32 * np.abs(ref).max())  # MLX fuses s·q + b
    assert np.unique(unpack_bitstream_np(words, C, bits)).size == 1 << bits  # every value of the width occurs


@pytest.mark.parametrize("call,match", [
    (lambda q, s, b, x: ops.linear_quantized(x, q, s, b, bits=3, group_size=64), "bits must be 4 or 8"),
    (lambda q, s, b, x: ops.embedding_quantized(q, s, b, bits=7, group_size=64, ids=np.array([0], np.int32)),
     "MLX's affine widths 1-6 or 8, got 7"),
    (lambda q, s, b, x: ops.embedding_quantized(np.ascontiguousarray(q[:, :61]), s, b, bits=5, group_size=64, ids=np.array([0], np.int32)),
     "not a whole number of 5-bit values"),
    (lambda q, s, b, x: ops.linear_quantized(x, q, s, b, bits=4, group_size=48), "group_size"),
    (lambda q, s, b, x: ops.linear_quantized(x, q, s[:, :1], b, bits=4, group_size=64), "scales"),
    (lambda q, s, b, x: ops.linear_quantized(x, q, s, b[:2], bits=4, group_size=64), "biases"),
    (lambda q, s, b, x: ops.linear_quantized(x[:, :64].copy(), q, s, b, bits=4, group_size=64), "columns"),
    (lambda q, s, b, x: ops.linear_quantized(x, q, s, b, bits=8, group_size=64), "scales"),
    (lambda q, s, b, x: ops.quantize(np.zeros((4, 100), np.float32), bits=4, group_size=64), "multiple of group_size"),
    (lambda q, s, b, x: ops.embedding_quantized(q, s, b, bits=4, group_size=64, ids=np.array([9], np.int32)),
     r"ids\[0\] = 9 is out of range"),
])
def test_bad_input(call, match):
    w = rng(0).normal(size=(4, 128)).astype(np.float32)
    q, s, b = ops.quantize(w, bits=4, group_size=64, scale_dtype="f32")
    x = np.ones((2, 128), np.float32)
    with pytest.raises(mb.MarkbaseError, match=match):
        call(q.numpy(), s.numpy(), b.numpy(), x)


def x16_product_np(x, deq, s, b, group_size, sdtype, qmax=32767):
    """What the int16-activation decode kernel computes, in float64 from its f32 roundings: per group
    dx = max|x| / 32767, x16 = rint(x / dx) (f32 math), out = Σ_g s·dx·Σ q·x16 + b·Σ x. qmax=127: the
    int8-activation kernel's x8."""
    M, K = x.shape
    G = K // group_size
    xg = x.reshape(M, G, group_size)
    amax = np.abs(xg).max(-1)
    dx = (amax / np.float32(qmax)).astype(np.float32)
    inv = np.where(amax > 0, np.float32(qmax) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    x16 = np.clip(np.rint(xg * inv[..., None]), -qmax, qmax)  # [M, G, gs]
    sv, bv = as_np(s, sdtype).astype(np.float64), as_np(b, sdtype).astype(np.float64)  # [N, G]
    sq = deq - np.repeat(bv, group_size, axis=1)  # s·q [N, K]
    qx = np.einsum("mgj,ngj->mng", x16, sq.reshape(-1, G, group_size))  # Σ s·q·x16 per group
    return (qx * dx[:, None, :]).sum(-1) + xg.astype(np.float64).sum(-1) @ bv.T, amax


def _x16_kernel_runs(M):
    """Whether int16_activations reaches a 16-bit kernel for M rows: the decode GEMV (<= 8 rows) on AVX2 and
    AVX-512 VNNI, the prefill GEMM (more rows) on AVX-512 VNNI only."""
    simd = ops._quant_gemv_simd()
    return simd != "portable" and (M <= 8 or simd == "avx512-vnni")


@pytest.mark.parametrize("M,N,K,bits,group_size", GRID)
def test_linear_quantized_int16_activations(M, N, K, bits, group_size):
    """int16_activations on the CPU kernels (the decode GEMV with AVX2, the prefill GEMM with AVX-512 VNNI):
    they must compute exactly the 16-bit-rounded product (to f32 rounding: a kernel that ignored the flag
    differs by the rounding itself, far more), and that lies within Σ_g max|x_g|·2^-16·Σ_{k∈g}|s·q| of the
    true product; where no 16-bit kernel exists the product stays f32."""
    x, (q, s, b), deq, S = make_case(M, N, K, bits, group_size, "bf16", seed=M * 7 + N + K + bits)
    got = ops.linear_quantized(x, q, s, b, bits=bits, group_size=group_size, int16_activations=True)
    want = x.astype(np.float64) @ deq.T
    if not _x16_kernel_runs(M):
        check_close(got, want, S, K, "no 16-bit kernel: int16_activations ignored")
        return
    want16, amax = x16_product_np(x, deq, s, b, group_size, "bf16")
    check_close(got, want16, S, K, f"int16 M{M} N{N} K{K} q{bits} g{group_size}")
    sq = np.abs(deq - np.repeat(as_np(b, "bf16"), group_size, axis=1)).reshape(N, K // group_size, group_size)
    rounding = 2.0**-16 * (1 + 2**-10) * (amax @ sq.sum(-1).T)  # [M, N]
    assert (np.abs(want16 - want) <= rounding + 8 * np.sqrt(K + 1) * U32 * S).all()
    if K >= 64:  # the rounding shows: the flag reached the kernel
        f32 = ops.linear_quantized(x, q, s, b, bits=bits, group_size=group_size)
        assert not np.array_equal(f32.numpy(), got.numpy())


# Rows whose byte length is not a multiple of 64 (masked tail steps: K = 96, 352, 704), a group spanning two
# steps (8-bit, 128), N not a multiple of the 4-row tile, up to the GEMV's 8 x rows; 526 rows: blocks of 64 rows
# read as four streams of 16, then a last block of 14 (three 4-row tiles with stride 3, two single rows).
BYTE_CASES = [(1, 7, 96), (3, 33, 704), (8, 21, 352 * 2), (2, 64, 1536), (1, 5, 256), (2, 526, 1536)]
BYTE_GRID = [(M, N, K, bits, g) for (M, N, K) in BYTE_CASES for (bits, g) in FORMATS + [(8, 32), (4, 128)]
             if K % g == 0]


@pytest.mark.parametrize("sdtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("M,N,K,bits,group_size", BYTE_GRID)
def test_linear_quantized_x16_byte_kernel(M, N, K, bits, group_size, sdtype):
    """The decode GEMV's byte kernel (x16 split into bytes, vpdpbusd; AVX-512 VNNI) computes the same exact
    16-bit-rounded product as the 16-bit-lane kernels: both within f32 rounding of the float64 emulation
    (MARKBASE_SIMD=avx2 reruns this file's int16 tests on the AVX2 kernels, see below)."""
    if ops._quant_gemv_simd() != "avx512-vnni":
        pytest.skip("this CPU has no AVX-512 VNNI: the byte kernel cannot run (its 16-bit-lane twin is tested above)")
    x, (q, s, b), deq, S = make_case(M, N, K, bits, group_size, sdtype, seed=M * 13 + N + K + bits)
    want16 = x16_product_np(x, deq, s, b, group_size, sdtype)[0] if _x16_kernel_runs(M) else x.astype(np.float64) @ deq.T
    kw = dict(bits=bits, group_size=group_size, int16_activations=True)
    try:
        ops._set_quant_gemv_bytes(1)
        assert ops._quant_gemv_bytes() == (ops._quant_gemv_simd() == "avx512-vnni")
        got = ops.linear_quantized(x, q, s, b, **kw)
        ops._set_quant_gemv_bytes(0)
        lanes = ops.linear_quantized(x, q, s, b, **kw)
    finally:
        ops._set_quant_gemv_bytes(-1)
    what = f"bytes M{M} N{N} K{K} q{bits} g{group_size} {sdtype}"
    check_close(got, want16, S, K, what)
    check_close(lanes, want16, S, K, what + " (16-bit lanes)")


def _x8_kernel_runs(M, bits):
    """Whether int8_activations reaches an 8-bit-activation kernel: decode rows (<= 8) with 4-bit weights on
    AVX2 (vpmaddubsw) or AVX-512 VNNI (vpdpbusd). Elsewhere it means int16_activations."""
    return ops._quant_gemv_simd() in ("avx2", "avx512-vnni") and M <= 8 and bits == 4


def _want_int8_activations(x, deq, s, b, bits, group_size, sdtype):
    """The product int8_activations must compute on this CPU: x8's, else x16's, else f32's."""
    M = x.shape[0]
    if _x8_kernel_runs(M, bits):
        return x16_product_np(x, deq, s, b, group_size, sdtype, qmax=127)[0]
    if _x16_kernel_runs(M):
        return x16_product_np(x, deq, s, b, group_size, sdtype)[0]
    return x.astype(np.float64) @ deq.T


@pytest.mark.parametrize("sdtype", ["bf16", "f32"])
@pytest.mark.parametrize("M,N,K,bits,group_size", BYTE_GRID + [(12, 9, 256, 4, 64)])
def test_linear_quantized_int8_activations(M, N, K, bits, group_size, sdtype):
    """int8_activations (precision="fast"): the decode rows with 4-bit weights on AVX2 / AVX-512 VNNI compute the exact
    8-bit-rounded product (x8 = rint(x / dx), dx = max|x_g| / 127) to f32 rounding — a kernel that took x16
    instead differs by ~2^-8 relative, far more — and that product lies within Σ_g max|x_g|·2^-8·Σ|s·q| of the
    true one. 8-bit weights, prefill rows (12) and other CPUs take the 16-bit (or f32) product instead."""
    x, (q, s, b), deq, S = make_case(M, N, K, bits, group_size, sdtype, seed=M * 17 + N + K + bits)
    got = ops.linear_quantized(x, q, s, b, bits=bits, group_size=group_size, int8_activations=True)
    want = _want_int8_activations(x, deq, s, b, bits, group_size, sdtype)
    check_close(got, want, S, K, f"int8 M{M} N{N} K{K} q{bits} g{group_size} {sdtype}")
    if _x8_kernel_runs(M, bits):
        amax = np.abs(x.reshape(M, -1, group_size)).max(-1)
        sq = np.abs(deq - np.repeat(as_np(b, sdtype), group_size, axis=1)).reshape(N, K // group_size, group_size)
        rounding = 2.0**-8 * (1 + 2**-10) * (amax @ sq.sum(-1).T)  # [M, N]
        exact = x.astype(np.float64) @ deq.T
        assert (np.abs(want - exact) <= rounding + 8 * np.sqrt(K + 1) * U32 * S).all()


def test_linear_quantized_x16_byte_kernel_extremes():
    """Every x16 at ±32767 (each group's largest and the values that split into hi = ±127 / lo = 255) and
    8-bit q at 0 and 255 in alternation: the byte sums are exact integers, so the result matches the
    emulation as closely as for random values."""
    M, N, K = 2, 9, 256
    x = np.where(np.arange(K) % 2 == 0, 1.0, -1.0).astype(np.float32)[None].repeat(M, 0)
    x[1] *= 3.0
    for bits in (4, 8):
        w = np.where((np.arange(N)[:, None] + np.arange(K)[None]) % 3 == 0, 2.0, -2.0).astype(np.float32)
        q, s, b = ops.quantize(w, bits=bits, group_size=64, scale_dtype="f32")
        deq = ops.dequantize(q, s, b, bits=bits, group_size=64).numpy().astype(np.float64)
        # (no 16-bit kernel on a CPU without SIMD: the f32 product is what runs)
        want16 = x16_product_np(x, deq, s, b, 64, "f32")[0] if _x16_kernel_runs(M) else x.astype(np.float64) @ deq.T
        S = np.abs(x.astype(np.float64)) @ np.abs(deq).T + 1.0
        ops._set_quant_gemv_bytes(1)
        try:
            got = ops.linear_quantized(x, q, s, b, bits=bits, group_size=64, int16_activations=True)
        finally:
            ops._set_quant_gemv_bytes(-1)
        check_close(got, want16, S, K, f"extremes q{bits}")
        # x8 at ±127 against 4-bit q at 0 and 15: the same exactness with 8-bit activations
        got8 = ops.linear_quantized(x, q, s, b, bits=bits, group_size=64, int8_activations=True)
        check_close(got8, _want_int8_activations(x, deq, s, b, bits, 64, "f32"), S, K, f"extremes x8 q{bits}")


def test_linear_quantized_int16_activations_gemm_non_finite():
    """A NaN or infinity in any x row sends the whole prefill product to the f32 GEMM: it reaches its own
    row's outputs and no other row's."""
    K, N, M = 128, 40, 12
    x = rng(7).normal(size=(M, K)).astype(np.float32)
    w = rng(8).normal(size=(N, K)).astype(np.float32)
    q, s, b = ops.quantize(w, bits=4, group_size=64, scale_dtype="bf16")
    for bad in (np.nan, np.inf):
        xb = x.copy()
        xb[5, 70] = bad
        got = ops.linear_quantized(xb, q, s, b, bits=4, group_size=64, int16_activations=True).numpy()
        f32 = ops.linear_quantized(xb, q, s, b, bits=4, group_size=64).numpy()
        assert not np.isfinite(got[5]).any() and np.isfinite(np.delete(got, 5, axis=0)).all()
        np.testing.assert_array_equal(got[np.arange(M) != 5], f32[np.arange(M) != 5])


@pytest.mark.parametrize("flag,step", [("int16_activations", 2.0**-16), ("int8_activations", 2.0**-8)])
def test_linear_quantized_int16_activations_edge_rows(flag, step):
    """A zero group (dx = 0), huge, tiny and near-underflow magnitudes, and a NaN row: the 16-bit path stays finite where x is
    and lets a NaN through (it falls back to the f32 kernels), never turns it into a number. The same with 8-bit
    activations. Each result within its rounding bound Σ_g step·max|x_g|·Σ_{k∈g}|s·q| (+ f32 noise)."""
    K, N = 128, 16
    x = rng(5).normal(size=(3, K)).astype(np.float32)
    x[0, :64] = 0
    x[1, :64] *= 1e30
    x[1, 64:] *= 1e-30
    x[0, 64:] *= 1e-37  # 32767 / max|x| overflows a float here; the zeros among them must stay zeros
    x[0, 64::3] = 0
    w = (rng(6).normal(size=(N, K)) * 0.5).astype(np.float32)
    q, s, b = ops.quantize(w, bits=4, group_size=64, scale_dtype="f32")
    deq = ops.dequantize(q, s, b, bits=4, group_size=64).numpy().astype(np.float64)
    got = ops.linear_quantized(x, q, s, b, bits=4, group_size=64, **{flag: True}).numpy()
    want = x.astype(np.float64) @ deq.T
    assert np.isfinite(got).all()
    amax = np.abs(x.astype(np.float64)).reshape(3, 2, 64).max(-1)  # [M, G]
    sq = np.abs(deq - np.repeat(b.numpy().astype(np.float64), 64, axis=1)).reshape(N, 2, 64).sum(-1)  # [N, G]
    S = np.abs(x.astype(np.float64)) @ np.abs(deq).T
    # (+ a subnormal dx's own rounding, 2^-149 absolute, times Σ|q·xq| ≤ (1/step)·Σ|s·q|: the 1e-37 row)
    bound = step * (1 + 2**-10) * (amax @ sq.T) + sq.sum(-1) / step * 2.0**-149 + 8 * np.sqrt(K + 1) * U32 * S
    assert (np.abs(got - want) <= bound).all()
    x[2, 7] = np.nan
    got = ops.linear_quantized(x, q, s, b, bits=4, group_size=64, **{flag: True}).numpy()
    assert np.isnan(got[2]).all() and np.isfinite(got[:2]).all()


_AVX2_CHILD = """
import sys
import markbase as mb
assert mb._core.ops._quant_gemv_simd() == "avx2", mb._core.ops._quant_gemv_simd()
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:benchmark", sys.argv[1], "-k",
                     "int16_activations or int8_activations or x16_byte_kernel"]))
"""


def test_int16_kernels_of_avx2_on_any_x86():
    """MARKBASE_SIMD=avx2 keeps the AVX2 16- and 8-bit-activation kernels where AVX-512 VNNI would run, so on
    such a machine both paths are checked against the exact emulations above (on an AVX2-only machine this
    repeats the default run)."""
    if ops._quant_gemv_simd() == "portable":
        pytest.skip("this CPU has no AVX2: no AVX2 kernels to check (the portable path is checked above)")
    res = subprocess.run([sys.executable, "-c", _AVX2_CHILD, __file__], env=dict(os.environ, MARKBASE_SIMD="avx2"),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]


@pytest.mark.parametrize("flags", [{}, {"int16_activations": True}, {"int8_activations": True}])
@pytest.mark.parametrize("bits,group_size", [(4, 64), (8, 32), (4, 128)])
def test_linear_quantized_row_invariant(bits, group_size, flags, device):
    """row_invariant (a batched decode step): every row bit for bit as that row alone gives it, with the
    activation rounding of a single row, for row counts that otherwise take the 8-row byte GEMV, its passes
    (9-20) or the GEMM (more); a non-finite row leaves the others as they are alone."""
    N, K = 40, 256
    x, (q, s, b), _, _ = make_case(25, N, K, bits, group_size, "bf16", seed=bits + group_size)
    kw = dict(bits=bits, group_size=group_size, device=device, **flags)
    alone = [to_f64(ops.linear_quantized(x[m:m + 1], q, s, b, **kw))[0] for m in range(len(x))]
    for M in (2, 5, 9, 16, 25):
        got = to_f64(ops.linear_quantized(x[:M], q, s, b, row_invariant=True, **kw))
        for m in range(M):
            assert np.array_equal(got[m], alone[m]), f"M={M} row {m}: {np.max(np.abs(got[m] - alone[m]))}"
    if device != "cpu":
        return
    bad = x[:9].copy()
    bad[4, 7] = np.nan
    got = to_f64(ops.linear_quantized(bad, q, s, b, row_invariant=True, **kw))
    assert np.isnan(got[4]).all()
    for m in (0, 1, 2, 3, 5, 6, 7, 8):
        assert np.array_equal(got[m], alone[m]), f"row {m} beside a NaN row"
