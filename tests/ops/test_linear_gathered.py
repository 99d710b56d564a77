"""linear_gathered (ops/linear.h): out[r] = x[r] · w[ids[r]]ᵀ, each row through the matrix its id selects
(MoE experts chosen on the device). Checked against the float64 numpy product with linear's error bound
(tests/references/linear.py), for the fast kernel on every device and the CPU reference, into guarded
outputs.
"""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import rng, run_guarded, tensor, to_f64
from references.linear import W_DTYPES, assert_linear_close, round_to


def numpy_gathered(x, w, ids, w_dtype):
    x64, w64 = x.astype(np.float64), round_to(w, w_dtype)
    want = np.stack([x64[r] @ w64[e].T for r, e in enumerate(ids)])
    scale = np.stack([np.abs(x64[r]) @ np.abs(w64[e]).T for r, e in enumerate(ids)])
    return want, scale


# (R, E, N, K): decode (R = top-k distinct experts), repeated experts, prefill-sized, odd sizes.
SHAPES = [(1, 1, 1, 1), (8, 16, 40, 64), (6, 3, 33, 70), (40, 8, 17, 129), (2, 4, 300, 32)]


@pytest.mark.parametrize("R,E,N,K", SHAPES)
@pytest.mark.parametrize("w_dtype", W_DTYPES)
def test_linear_gathered_parity(R, E, N, K, w_dtype, device):
    r = rng(R * 7 + E + N + K)
    x = r.normal(size=(R, K)).astype(np.float32)
    w = r.normal(size=(E, N, K)).astype(np.float32)
    ids = r.integers(0, E, size=R).astype(np.int32)
    want, scale = numpy_gathered(x, w, ids, w_dtype)
    wt = tensor(w, w_dtype)
    for what, kw in ((device, {"device": device}), ("reference", {"reference": True})):
        got = run_guarded(lambda out: ops.linear_gathered(x, wt, ids, out=out, **kw), (R, N), "f32",
                          f"linear_gathered {what}")
        assert_linear_close(got, want, scale, K, "f32", f"linear_gathered {what} R={R} E={E} N={N} K={K} w={w_dtype}")


def test_linear_gathered_equals_linear_per_row(device):
    # Row r must be exactly what linear() gives for x[r] and w[ids[r]] on the same device (same kernels).
    r = rng(5)
    x = r.normal(size=(4, 96)).astype(np.float32)
    w = r.normal(size=(5, 48, 96)).astype(np.float32)
    ids = np.array([4, 0, 4, 2], np.int32)
    got = ops.linear_gathered(x, w, ids, device=device).numpy()
    for row, e in enumerate(ids):
        want = ops.linear(x[row:row + 1], w[e], device=device).numpy()[0]
        np.testing.assert_allclose(got[row], want, rtol=2e-6, atol=1e-6 * np.abs(want).max())


@pytest.mark.parametrize("operand,call", [
    ("ids", lambda: ops.linear_gathered(np.ones((2, 4), np.float32), np.ones((3, 5, 4), np.float32),
                                        np.array([0, 3], np.int32))),
    ("ids", lambda: ops.linear_gathered(np.ones((2, 4), np.float32), np.ones((3, 5, 4), np.float32),
                                        np.array([0, -1], np.int32))),
    ("ids", lambda: ops.linear_gathered(np.ones((2, 4), np.float32), np.ones((3, 5, 4), np.float32),
                                        np.array([0], np.int32))),
    ("w", lambda: ops.linear_gathered(np.ones((2, 4), np.float32), np.ones((3, 5, 3), np.float32),
                                      np.array([0, 1], np.int32))),
    ("w", lambda: ops.linear_gathered(np.ones((2, 4), np.float32), np.ones((5, 4), np.float32),
                                      np.array([0, 1], np.int32))),
    ("x", lambda: ops.linear_gathered(np.ones((2, 4), np.float16), np.ones((3, 5, 4), np.float32),
                                      np.array([0, 1], np.int32))),
])
def test_linear_gathered_bad_input(operand, call):
    with pytest.raises(mb.InputError) as e:
        call()
    msg = str(e.value)
    assert msg.startswith("linear_gathered: ") and (f" {operand} " in msg or f"{operand}[" in msg), msg


@pytest.mark.parametrize("bf16_products", [False, True])
@pytest.mark.parametrize("R", [1, 2, 5, 9, 16])
def test_linear_gathered_rows_as_linear(R, bf16_products, device):
    """Each row bit for bit as linear() of its matrix gives that row alone, bf16_products included (the MoE
    experts multiply the same way gathered or grouped), with row_invariant (a batched decode step) however
    many rows share a matrix."""
    r = rng(R + 100 * bf16_products)
    E, N, K = 4, 24, 96
    x = r.normal(size=(R, K)).astype(np.float32)
    w = r.normal(size=(E, N, K)).astype(np.float32)
    ids = r.integers(0, E, size=R).astype(np.int32)
    got = to_f64(ops.linear_gathered(x, tensor(w, "bf16"), ids, device=device, bf16_products=bf16_products,
                                     row_invariant=True))
    for i, e in enumerate(ids):
        want = to_f64(ops.linear(x[i:i + 1], tensor(w[e], "bf16"), device=device, bf16_products=bf16_products))
        assert np.array_equal(got[i], want[0]), f"row {i} (matrix {e})"
