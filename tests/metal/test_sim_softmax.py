"""softmax on metal-sim: the Metal kernels (metal/softmax.metal) against the CPU scalar reference, with the
thresholds of tests/ops/test_softmax.py (per-dtype element threshold + 2^-23·√D for the f32 row sum, whose
order differs: a simd / threadgroup tree here, sequential in the reference). The general parity grid (every
dtype at parity.SIZES) runs in tests/ops/test_softmax.py on every device, metal-sim included; this file keeps
the Metal-specific widths, special rows up to D = 2000, large logits, in place for every dtype and bad input."""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import FLOAT_DTYPES, assert_close, device_vs_reference, rng, tensor
from references.softmax import make_input, shapes, tol

from .sim import require_sim

DEVICE = "metal-sim"


# Widths beyond parity.SIZES (which run in tests/ops/test_softmax.py on every device): a row one past 128
# threads and one spanning several simdgroups.
@pytest.mark.parametrize("D", [129, 1500])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_softmax_parity(dtype, D):
    require_sim()
    r = rng(D)
    for shape in shapes(D):
        xt = tensor(make_input(r, shape), dtype)
        device_vs_reference(lambda **kw: ops.softmax(xt, **kw), shape, dtype, DEVICE, f"softmax {dtype} {shape}",
                            *tol(dtype, D))


@pytest.mark.parametrize("D", [1, 3, 33, 2000])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_special_rows(dtype, D):
    """As the CPU ops: all −inf → zeros; any NaN → whole row NaN; +inf → NaN (as torch); others normal."""
    require_sim()
    r = rng(7)
    x = r.normal(size=(6, D)).astype(np.float32)
    x[0] = -np.inf
    x[1, D // 2] = np.nan
    x[2, D - 1] = np.inf
    x[4, :] = -np.inf
    x[4, 0] = 1.5  # one live entry in a masked row: probability 1 there
    x[5, 0] = np.nan
    x[5, D - 1] = np.inf  # NaN and +inf in one row: NaN
    xt = tensor(x, dtype)
    y = ops.softmax(xt, device=DEVICE).to_float32()
    ref = ops.softmax(xt, reference=True).to_float32()
    np.testing.assert_array_equal(y[0], np.zeros(D), err_msg="fully masked row must be zeros")
    assert np.isnan(y[1]).all(), "NaN must spread to its whole row"
    assert np.isnan(y[2]).all(), "+inf gives inf − inf = NaN, as torch"
    assert np.isnan(y[5]).all()
    assert_close(y[3], ref[3], dtype, *tol(dtype, D), what="normal row next to special ones")
    want4 = np.zeros(D)
    want4[0] = 1.0
    np.testing.assert_array_equal(y[4], want4)


def test_large_and_equal_logits():
    """Logits of ±3e38 (the shift by the max keeps e^(x − max) finite) and a constant row (exactly 1/D)."""
    require_sim()
    x = np.array([[3e38, -3e38, 3e38, 0.0], [5.0, 5.0, 5.0, 5.0]], np.float32)
    y = ops.softmax(x, device=DEVICE).numpy()
    np.testing.assert_array_equal(y, ops.softmax(x, reference=True).numpy())
    np.testing.assert_array_equal(y[1], np.full(4, 0.25, np.float32))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_in_place(dtype):
    require_sim()
    x = make_input(rng(8), (5, 301))
    want = ops.softmax(tensor(x, dtype), device=DEVICE).to_float32()
    ref = ops.softmax(tensor(x, dtype), reference=True)
    assert_close(want, ref, dtype, *tol(dtype, 301), what="metal-sim vs reference")
    xt = tensor(x, dtype)  # (for f32 this wraps x itself)
    ops.softmax(xt, out=xt, device=DEVICE)
    np.testing.assert_array_equal(xt.to_float32(), want)


def test_empty_and_bad_input():
    require_sim()
    assert ops.softmax(np.zeros((0, 5), np.float32), device=DEVICE).numpy().shape == (0, 5)
    with pytest.raises(mb.InputError, match="^softmax: .*out"):
        ops.softmax(np.ones((2, 5), np.float32), out=np.ones((5, 2), np.float32), device=DEVICE)
    t = mb.Tensor(np.zeros((4, 8), np.float32))
    with pytest.raises(mb.InputError, match="softmax: out overlaps input x"):
        ops.softmax(t.slice(0, 1, 3), out=t.slice(0, 0, 2), device=DEVICE)
