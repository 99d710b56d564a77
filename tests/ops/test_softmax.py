"""Parity grid for softmax over the last dimension (thresholds: tests/parity.py, widened for the row sum by
references/softmax.py's tol)."""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import FLOAT_DTYPES, SIZES, TOL, assert_close, device_vs_reference, rng, round_to, tensor
from references.softmax import make_input, shapes, tol


def softmax_np(x):
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


@pytest.mark.parametrize("D", SIZES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_softmax_parity(dtype, D, device):
    r = rng(D)
    rtol, atol = tol(dtype, D)
    for shape in shapes(D):
        x = make_input(r, shape)
        xt = tensor(x, dtype)
        what = f"softmax {dtype} {shape}"
        _, ref = device_vs_reference(lambda **kw: ops.softmax(xt, **kw), shape, dtype, device, what, rtol, atol)
        assert_close(ref, softmax_np(round_to(x, dtype)), dtype, rtol, atol, what=f"{what}: reference vs numpy")
        # Each row sums to 1 (up to the output rounding of D terms).
        sums = np.sum(ref.to_float32().astype(np.float64), axis=-1)
        np.testing.assert_allclose(sums, 1.0, rtol=0, atol=TOL[dtype][0] * 4 + 1e-5, err_msg=what)


@pytest.mark.parametrize("D", [1, 3, 33])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("reference", [False, True])
def test_special_rows(dtype, D, reference):
    """Documented behaviour: all −inf → zeros; any NaN → whole row NaN; +inf → NaN (as torch); others normal."""
    r = rng(7)
    x = r.normal(size=(5, D)).astype(np.float32)
    x[0] = -np.inf
    x[1, D // 2] = np.nan
    x[2, D - 1] = np.inf
    x[4, :] = -np.inf
    x[4, 0] = 1.5  # one live entry in a masked row: probability 1 there
    y = ops.softmax(tensor(x, dtype), reference=reference).to_float32()
    np.testing.assert_array_equal(y[0], np.zeros(D), err_msg="fully masked row must be zeros")
    assert np.isnan(y[1]).all(), "NaN must spread to its whole row"
    assert np.isnan(y[2]).all(), "+inf gives inf − inf = NaN, as torch"
    assert_close(y[3], softmax_np(round_to(x[3], dtype)), dtype, *tol(dtype, D), what="normal row next to special ones")
    want4 = np.zeros(D)
    want4[0] = 1.0
    np.testing.assert_array_equal(y[4], want4)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("reference", [False, True])
def test_in_place(dtype, reference):
    x = make_input(rng(8), (5, 301))
    want = ops.softmax(tensor(x, dtype), reference=reference).to_float32()
    xt = tensor(x, dtype)
    ops.softmax(xt, out=xt, reference=reference)
    np.testing.assert_array_equal(xt.to_float32(), want)


@pytest.mark.parametrize("call, operand", [
    (lambda: ops.softmax(np.ones((), np.float32)), "x"),
    (lambda: ops.softmax(np.ones((2, 0), np.float32)), "x"),
    (lambda: ops.softmax(np.ones((2, 5), np.int64)), "x"),
    (lambda: ops.softmax(np.ones((2, 5), np.float64)), "x"),
    (lambda: ops.softmax(np.ones((4, 6), np.float32)[:, ::2]), "x"),
    (lambda: ops.softmax(np.ones((2, 5), np.float32), out=np.ones((5, 2), np.float32)), "out"),
    (lambda: ops.softmax(np.ones((2, 5), np.float32), out=np.ones((2, 5), np.float16)), "out"),
])
def test_bad_input(call, operand):
    with pytest.raises(mb.InputError, match=rf"^softmax: .*{operand}"):
        call()


def test_partial_alias_rejected():
    t = mb.Tensor(np.zeros((4, 8), np.float32))
    with pytest.raises(mb.InputError, match="softmax: out overlaps input x"):
        ops.softmax(t.slice(0, 1, 3), out=t.slice(0, 0, 2))
