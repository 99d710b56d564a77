"""linear_quantized_gathered (ops/quant.h): out[r] = x[r] · W_{ids[r]}ᵀ with E stacked affine-quantized matrices
(the MoE experts of a quantized checkpoint at decode). Checked against the float64 numpy product of the
dequantized matrices with test_quant.py's bound, on every device and for the CPU reference; and on the CPU,
row by row bit for bit against linear_quantized of that row alone (the gathered call runs every row's matrix
in one dispatch of the same kernels, so nothing may change but the speed).
"""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import rng, to_f64

U32 = 2.0**-24


def stacked_case(R, E, N, K, bits, group_size, sdtype, seed):
    """x [R, K], ids [R], the stacked (q, scales, biases) as the model holds them, and the float64 matrices."""
    r = rng(seed)
    x = r.normal(size=(R, K)).astype(np.float32)
    w = r.normal(size=(E * N, K)).astype(np.float32)
    ids = r.integers(0, E, size=R).astype(np.int32)
    q, s, b = ops.quantize(w, bits=bits, group_size=group_size, scale_dtype=sdtype)
    deq = to_f64(ops.dequantize(q, s, b, bits=bits, group_size=group_size)).reshape(E, N, K)
    G = K // group_size
    qs = mb.Tensor(q.numpy().reshape(E, N, -1))
    ss = mb.Tensor(s.numpy().reshape(E, N, G), dtype=sdtype)
    bs = mb.Tensor(b.numpy().reshape(E, N, G), dtype=sdtype)
    return x, ids, (qs, ss, bs), deq


def check_close(got, x, ids, deq, what):
    g = to_f64(got)
    assert np.isfinite(g).all(), f"{what}: non-finite output"
    x64 = x.astype(np.float64)
    want = np.stack([deq[e] @ x64[r] for r, e in enumerate(ids)])
    S = np.stack([np.abs(deq[e]) @ np.abs(x64[r]) for r, e in enumerate(ids)])  # Σ |x|·|w| per output
    limit = 8 * np.sqrt(x.shape[1] + 1) * U32 * S + 1e-30
    err = np.abs(g - want)
    if not (err <= limit).all():
        i = np.unravel_index(np.argmax(err - limit), err.shape)
        raise AssertionError(f"{what}: at {i} got {g[i]!r} want {want[i]!r} |err| {err[i]:.3g} > {limit[i]:.3g}")


# (R, E, N, K): decode's top-8 of 16 experts, two tokens' rows (16), a repeated expert, rows that are not a
# multiple of the 4-row tile, a masked byte tail (K = 96 at 4 bits: 48 bytes), several blocks per matrix.
SHAPES = [(8, 16, 40, 128), (16, 6, 24, 256), (3, 2, 7, 96), (1, 1, 5, 64), (5, 4, 530, 512)]
FORMATS = [(4, 64), (8, 64), (4, 32), (8, 128)]
GRID = [(R, E, N, K, bits, g) for (R, E, N, K) in SHAPES for (bits, g) in FORMATS if K % g == 0]


@pytest.mark.parametrize("sdtype", ["bf16", "f32"])
@pytest.mark.parametrize("R,E,N,K,bits,group_size", GRID)
def test_linear_quantized_gathered(R, E, N, K, bits, group_size, sdtype, device):
    x, ids, (q, s, b), deq = stacked_case(R, E, N, K, bits, group_size, sdtype, seed=R * 7 + E + N + K + bits)
    kw = dict(bits=bits, group_size=group_size)
    what = f"gathered R{R} E{E} N{N} K{K} q{bits} g{group_size} {sdtype}"
    check_close(ops.linear_quantized_gathered(x, q, s, b, ids, device=device, **kw), x, ids, deq, f"{what} {device}")
    check_close(ops.linear_quantized_gathered(x, q, s, b, ids, reference=True, **kw), x, ids, deq, f"{what} reference")


@pytest.mark.parametrize("flags", [{}, {"int16_activations": True}, {"int8_activations": True}])
@pytest.mark.parametrize("bits,group_size", FORMATS)
def test_gathered_rows_equal_linear_quantized_alone(bits, group_size, flags):
    # Every row exactly as linear_quantized computes it alone (the decode byte kernel with rounded x where the
    # flags allow it): one call over all rows changes how the work is shared, not a single value.
    R, E, N, K = 8, 5, 530, 512
    x, ids, (q, s, b), _ = stacked_case(R, E, N, K, bits, group_size, "bf16", seed=bits + group_size)
    x[1:3] = x[0]  # a token's row repeated for several experts, as the MoE layer gathers it (rounded once)
    x[6] = x[5]
    kw = dict(bits=bits, group_size=group_size, **flags)
    got = ops.linear_quantized_gathered(x, q, s, b, ids, **kw).numpy()
    qn, sn, bn = q.numpy(), s.numpy(), b.numpy()
    for r, e in enumerate(ids):
        alone = ops.linear_quantized(x[r:r + 1], mb.Tensor(qn[e]), mb.Tensor(sn[e], dtype="bf16"),
                                     mb.Tensor(bn[e], dtype="bf16"), **kw).numpy()[0]
        np.testing.assert_array_equal(got[r], alone, err_msg=f"row {r} (matrix {e}) {flags}")


def test_a_wrong_matrix_is_visible():
    # Sensitivity: the rows of matrix 1 move when one of its values flips; the other rows do not.
    x, ids, (q, s, b), _ = stacked_case(4, 3, 16, 128, 4, 64, "f32", seed=3)
    ids = np.array([1, 0, 2, 1], np.int32)
    base = ops.linear_quantized_gathered(x, q, s, b, ids, bits=4, group_size=64, int16_activations=True).numpy()
    qq = q.numpy().copy()
    qq[1, 5, 10] ^= 0x0F
    moved = ops.linear_quantized_gathered(x, mb.Tensor(qq), s, b, ids, bits=4, group_size=64,
                                          int16_activations=True).numpy()
    changed = np.abs(moved - base) > 1e-6
    assert changed.any(axis=1).tolist() == [True, False, False, True]
    assert changed[:, 5].tolist() == [True, False, False, True] and changed.sum() == 2


def _stacked(E=3, N=5, K=64):
    w = rng(0).normal(size=(E * N, K)).astype(np.float32)
    q, s, b = ops.quantize(w, bits=4, group_size=64, scale_dtype="f32")
    return q.numpy().reshape(E, N, -1), s.numpy().reshape(E, N, -1), b.numpy().reshape(E, N, -1)


@pytest.mark.parametrize("operand,call", [
    ("ids", lambda q, s, b: ops.linear_quantized_gathered(np.ones((2, 64), np.float32), q, s, b,
                                                          np.array([0, 3], np.int32), bits=4, group_size=64)),
    ("ids", lambda q, s, b: ops.linear_quantized_gathered(np.ones((2, 64), np.float32), q, s, b,
                                                          np.array([-1, 0], np.int32), bits=4, group_size=64)),
    ("ids", lambda q, s, b: ops.linear_quantized_gathered(np.ones((2, 64), np.float32), q, s, b,
                                                          np.array([0], np.int32), bits=4, group_size=64)),
    ("x", lambda q, s, b: ops.linear_quantized_gathered(np.ones((2, 32), np.float32), q, s, b,
                                                        np.array([0, 1], np.int32), bits=4, group_size=64)),
    ("w.q", lambda q, s, b: ops.linear_quantized_gathered(np.ones((2, 64), np.float32), q[0], s, b,
                                                          np.array([0, 1], np.int32), bits=4, group_size=64)),
    ("w.scales", lambda q, s, b: ops.linear_quantized_gathered(np.ones((2, 64), np.float32), q, s[:2], b[:2],
                                                               np.array([0, 1], np.int32), bits=4, group_size=64)),
])
def test_linear_quantized_gathered_bad_input(operand, call):
    with pytest.raises(mb.InputError) as e:
        call(*_stacked())
    msg = str(e.value)
    assert msg.startswith("linear_quantized_gathered: ") and (f"{operand} " in msg or f"{operand}[" in msg), msg
