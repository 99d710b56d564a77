"""Parity grid for rms_norm and layer_norm (thresholds: tests/parity.py, widened for the row reduction by
references/norm.py's tol)."""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import FLOAT_DTYPES, SIZES, assert_close, device_vs_reference, rng, round_to, tensor
from references.norm import LN_PARAMS, param, shapes, tol


def rms_norm_np(x, w, eps):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float64(np.float32(eps)))
    return y if w is None else y * w  # plain w, not 1 + w (spec §2.1, §9.1)


def layer_norm_np(x, w, b, eps):
    mean = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=-1, keepdims=True)  # biased, as torch
    y = (x - mean) / np.sqrt(var + np.float64(np.float32(eps)))
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


@pytest.mark.parametrize("D", SIZES)
@pytest.mark.parametrize("wdtype", [None, "f32", "bf16", "f16"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_rms_norm_parity(dtype, wdtype, D, device):
    r = rng(D)
    wt, w64 = param(r, D, wdtype, 1.0)
    rtol, atol = tol(dtype, D)
    for shape in shapes(D):
        x = r.normal(0.5, 2.0, size=shape).astype(np.float32)
        xt = tensor(x, dtype)
        what = f"rms_norm {dtype} w={wdtype} {shape}"
        _, ref = device_vs_reference(lambda **kw: ops.rms_norm(xt, wt, eps=1e-6, **kw), shape, dtype, device, what,
                                     rtol, atol)
        assert_close(ref, rms_norm_np(round_to(x, dtype), w64, 1e-6), dtype, rtol, atol, what=f"{what}: reference vs numpy")


@pytest.mark.parametrize("D", SIZES)
@pytest.mark.parametrize("pdtypes", LN_PARAMS, ids=lambda p: f"w{p[0]}-b{p[1]}")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_layer_norm_parity(dtype, pdtypes, D, device):
    r = rng(100 + D)
    wt, w64 = param(r, D, pdtypes[0], 1.0)
    bt, b64 = param(r, D, pdtypes[1], 0.0)
    rtol, atol = tol(dtype, D)
    for shape in shapes(D):
        # Mean 3 against std 2: a one-pass E[x²] − E[x]² would lose digits here; the kernels must not.
        x = r.normal(3.0, 2.0, size=shape).astype(np.float32)
        xt = tensor(x, dtype)
        what = f"layer_norm {dtype} {pdtypes} {shape}"
        _, ref = device_vs_reference(lambda **kw: ops.layer_norm(xt, wt, bt, eps=1e-5, **kw), shape, dtype, device,
                                     what, rtol, atol)
        assert_close(ref, layer_norm_np(round_to(x, dtype), w64, b64, 1e-5), dtype, rtol, atol,
                     what=f"{what}: reference vs numpy")


@pytest.mark.parametrize("reference", [False, True])
def test_eps_is_inside_the_root(reference):
    # x ~ 1e-3 makes mean(x²) ~ eps, so eps placement (and its value) changes the result by ~30 %.
    x = rng(3).normal(0, 1e-3, size=(5, 40)).astype(np.float32)
    y = ops.rms_norm(x, None, eps=1e-6, reference=reference)
    assert_close(y, rms_norm_np(x.astype(np.float64), None, 1e-6), "f32", *tol("f32", 40))
    z = ops.layer_norm(x, None, None, eps=1e-6, reference=reference)
    assert_close(z, layer_norm_np(x.astype(np.float64), None, None, 1e-6), "f32", *tol("f32", 40))
    # A zero row: (0 + eps)^-0.5 · 0 = 0, not NaN.
    assert np.array_equal(ops.rms_norm(np.zeros((2, 9), np.float32), reference=reference).numpy(), np.zeros((2, 9)))


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("reference", [False, True])
def test_nan_stays_in_its_row(op, reference):
    x = rng(4).normal(size=(3, 37)).astype(np.float32)
    x[1, 20] = np.nan
    y = getattr(ops, op)(x, reference=reference).numpy()
    assert np.isnan(y[1]).all(), "a NaN input must make its row NaN"
    assert np.isfinite(y[[0, 2]]).all(), "other rows must be unaffected"


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("reference", [False, True])
def test_in_place(dtype, reference):
    x = rng(5).normal(size=(6, 45)).astype(np.float32)
    w = rng(6).normal(size=(45,)).astype(np.float32)
    for op, args in [("rms_norm", (w,)), ("layer_norm", (w, w))]:
        want = getattr(ops, op)(tensor(x, dtype), *args, reference=reference).to_float32()
        xt = tensor(x, dtype)
        got = getattr(ops, op)(xt, *args, out=xt, reference=reference)
        assert got.data_ptr() == xt.data_ptr()
        np.testing.assert_array_equal(xt.to_float32(), want, err_msg=f"{op} in place")


X = np.ones((3, 8), np.float32)


@pytest.mark.parametrize("call, op, operand", [
    (lambda: ops.rms_norm(np.ones((), np.float32)), "rms_norm", "x"),
    (lambda: ops.rms_norm(np.ones((3, 8), np.int32)), "rms_norm", "x"),
    (lambda: ops.rms_norm(np.ones((3, 0), np.float32)), "rms_norm", "x"),
    (lambda: ops.rms_norm(np.ones((4, 8), np.float32)[:, ::2]), "rms_norm", "x"),
    (lambda: ops.rms_norm(X, np.ones(7, np.float32)), "rms_norm", "weight"),
    (lambda: ops.rms_norm(X, np.ones((1, 8), np.float32)), "rms_norm", "weight"),
    (lambda: ops.rms_norm(X, np.ones(8, np.int32)), "rms_norm", "weight"),
    (lambda: ops.rms_norm(X, np.ones(8, np.float64)), "rms_norm", "weight"),
    (lambda: ops.rms_norm(X, eps=-1.0), "rms_norm", "eps"),
    (lambda: ops.rms_norm(X, out=np.ones((3, 9), np.float32)), "rms_norm", "out"),
    (lambda: ops.rms_norm(X, out=mb.Tensor(np.ones((3, 8), np.float32), dtype="bf16")), "rms_norm", "out"),
    (lambda: ops.layer_norm(np.ones((), np.float32)), "layer_norm", "x"),
    (lambda: ops.layer_norm(X, np.ones(9, np.float32)), "layer_norm", "weight"),
    (lambda: ops.layer_norm(X, None, np.ones(7, np.float32)), "layer_norm", "bias"),
    (lambda: ops.layer_norm(X, None, np.ones((8, 1), np.float32)), "layer_norm", "bias"),
    (lambda: ops.layer_norm(X, np.ones(8, np.float32), np.ones(8, np.float16)), "layer_norm", "bias"),
    (lambda: ops.layer_norm(X, eps=float("nan")), "layer_norm", "eps"),
    (lambda: ops.layer_norm(X, out=np.ones((8, 3), np.float32)), "layer_norm", "out"),
])
def test_bad_input(call, op, operand):
    with pytest.raises(mb.InputError, match=rf"^{op}: .*{operand}"):
        call()


def test_partial_alias_rejected():
    t = mb.Tensor(np.zeros((4, 8), np.float32))
    with pytest.raises(mb.InputError, match="rms_norm: out overlaps input x"):
        ops.rms_norm(t.slice(0, 0, 2), out=t.slice(0, 1, 3))
