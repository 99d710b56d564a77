"""rms_norm / layer_norm on metal-sim: the Metal-specific cases (mixed parameter storage, eps, NaN / inf rows
up to several simdgroups, in place at D=1500, empty rows, input errors) against the CPU scalar reference, with the
thresholds of tests/ops/test_norm.py (per-dtype element threshold + 2^-23·√D for the row sums, whose order differs:
a simd / threadgroup tree here, sequential in the reference). The general parity grid (every dtype, weight /
bias dtype and size) runs in tests/ops/test_norm.py on every device, metal-sim included."""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import FLOAT_DTYPES, assert_close, device_vs_reference, rng, tensor
from references.norm import param, tol

from .sim import require_sim

DEVICE = "metal-sim"


def check(call, x, dtype, what):
    xt = tensor(x, dtype)
    device_vs_reference(lambda **kw: call(xt, **kw), x.shape, dtype, DEVICE, what, *tol(dtype, x.shape[-1]))


@pytest.mark.parametrize("wdtype, xdtype", [("bf16", "f32"), ("f32", "bf16"), ("f16", "bf16"), ("bf16", "f16")])
def test_mixed_parameter_storage(wdtype, xdtype):
    """Weight / bias stored differently from x (kernels rms_norm_w<P>_<S>, layer_norm_w<P>_<S>)."""
    require_sim()
    r = rng(9)
    D = 300
    wt, _ = param(r, D, wdtype, 1.0)
    bt, _ = param(r, D, wdtype, 0.0)
    x = r.normal(1.0, 2.0, size=(5, D)).astype(np.float32)
    check(lambda xt, **kw: ops.rms_norm(xt, wt, **kw), x, xdtype, f"rms_norm w={wdtype} x={xdtype}")
    check(lambda xt, **kw: ops.layer_norm(xt, wt, bt, **kw), x, xdtype, f"layer_norm p={wdtype} x={xdtype}")
    check(lambda xt, **kw: ops.layer_norm(xt, None, bt, **kw), x, xdtype, f"layer_norm b={wdtype} x={xdtype}")


def test_eps_and_zero_rows():
    require_sim()
    # x ~ 1e-3 makes mean(x²) ~ eps, so eps placement (and its value) changes the result by ~30 %.
    x = rng(3).normal(0, 1e-3, size=(5, 40)).astype(np.float32)
    for call in (lambda **kw: ops.rms_norm(x, None, eps=1e-6, **kw), lambda **kw: ops.layer_norm(x, None, None, eps=1e-6, **kw)):
        assert_close(call(device=DEVICE), call(reference=True), "f32", *tol("f32", 40), what="eps inside the root")
    # A zero row: (0 + eps)^-0.5 · 0 = 0, not NaN; layer_norm of a constant row: 0 (+ bias).
    z = np.zeros((2, 9), np.float32)
    assert np.array_equal(ops.rms_norm(z, device=DEVICE).numpy(), z)
    b = np.arange(9, dtype=np.float32)
    assert np.array_equal(ops.layer_norm(np.full((3, 9), 7.0, np.float32), None, b, device=DEVICE).numpy(), np.tile(b, (3, 1)))


@pytest.mark.parametrize("D", [37, 2000])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_nan_stays_in_its_row(op, D):
    require_sim()
    x = rng(4).normal(size=(3, D)).astype(np.float32)
    x[1, D // 2] = np.nan
    y = getattr(ops, op)(x, device=DEVICE).numpy()
    assert np.isnan(y[1]).all(), "a NaN input must make its row NaN"
    assert np.isfinite(y[[0, 2]]).all(), "other rows must be unaffected"
    x[1, D // 2] = np.inf  # inf² = inf: r = 0, inf·0 = NaN, as the CPU ops
    got = getattr(ops, op)(x, device=DEVICE).numpy()
    want = getattr(ops, op)(x, reference=True).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_in_place(dtype):
    require_sim()
    x = rng(5).normal(size=(6, 1500)).astype(np.float32)  # 384 threads: several simdgroups per row
    w = rng(6).normal(size=(1500,)).astype(np.float32)
    for op, args in [("rms_norm", (w,)), ("layer_norm", (w, w))]:
        want = getattr(ops, op)(tensor(x, dtype), *args, device=DEVICE).to_float32()
        xt = tensor(x, dtype)
        got = getattr(ops, op)(xt, *args, out=xt, device=DEVICE)
        assert got.data_ptr() == xt.data_ptr()
        np.testing.assert_array_equal(xt.to_float32(), want, err_msg=f"{op} in place")


def test_empty_rows():
    require_sim()
    assert ops.rms_norm(np.zeros((0, 8), np.float32), device=DEVICE).numpy().shape == (0, 8)
    assert ops.layer_norm(np.zeros((2, 0, 8), np.float32), device=DEVICE).numpy().shape == (2, 0, 8)


def test_bad_input_is_still_an_input_error():
    require_sim()
    X = np.ones((3, 8), np.float32)
    with pytest.raises(mb.InputError, match="^rms_norm: .*weight"):
        ops.rms_norm(X, np.ones(7, np.float32), device=DEVICE)
    with pytest.raises(mb.InputError, match="^layer_norm: .*bias"):
        ops.layer_norm(X, np.ones(8, np.float32), np.ones(8, np.float16), device=DEVICE)
    t = mb.Tensor(np.zeros((4, 8), np.float32))
    with pytest.raises(mb.InputError, match="rms_norm: out overlaps input x"):
        ops.rms_norm(t.slice(0, 0, 2), out=t.slice(0, 1, 3), device=DEVICE)
