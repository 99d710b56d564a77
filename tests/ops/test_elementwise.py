"""Parity grid for the elementwise ops (see tests/parity.py for the thresholds)."""

import math

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import FLOAT_DTYPES, SIZES, assert_close, rng, round_to, run_guarded, tensor


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


UNARY = {
    # name: (call(x, **kw), numpy float64 reference)
    "gelu_tanh": (lambda x, **kw: ops.gelu_tanh(x, **kw), gelu_tanh),
    "silu": (lambda x, **kw: ops.silu(x, **kw), lambda x: x / (1 + np.exp(-x))),
    "relu": (lambda x, **kw: ops.relu(x, **kw), lambda x: np.maximum(x, 0)),
    "sigmoid": (lambda x, **kw: ops.sigmoid(x, **kw), lambda x: 1 / (1 + np.exp(-x))),
    "softplus": (lambda x, **kw: ops.softplus(x, **kw), softplus),
    "softcap": (lambda x, **kw: ops.softcap(x, 3.5, **kw), lambda x: 3.5 * np.tanh(x / 3.5)),
    "clamp": (lambda x, **kw: ops.clamp(x, -1.25, 0.75, **kw), lambda x: np.clip(x, -1.25, 0.75)),
    "scale": (lambda x, **kw: ops.scale(x, 0.37, **kw), lambda x: x * np.float64(np.float32(0.37))),
}


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_parity(name, dtype, n, device):
    call, ref_np = UNARY[name]
    x = rng(n).normal(0, 4, size=(n,)).astype(np.float32)
    x[0] = 30.0 if n > 1 else x[0]  # exercises softplus' linear branch and saturating tails
    xt = tensor(x, dtype)
    fast = run_guarded(lambda out: call(xt, out=out, device=device), (n,), dtype, f"{name} fast")
    ref = run_guarded(lambda out: call(xt, out=out, reference=True), (n,), dtype, f"{name} reference")
    assert_close(fast, ref, dtype, what=f"{name} {dtype} n={n}: {device} vs reference")
    assert_close(ref, ref_np(round_to(x, dtype)), dtype, what=f"{name} {dtype} n={n}: reference vs numpy")


@pytest.mark.parametrize("shape_b", ["same", "row", "scalar"])
@pytest.mark.parametrize("n", [1, 33, 4097])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name", ["add", "mul"])
def test_binary_parity(name, dtype, n, shape_b, device):
    r = rng(7)
    a = r.normal(size=(3, n)).astype(np.float32)
    b = {"same": r.normal(size=(3, n)), "row": r.normal(size=(n,)), "scalar": r.normal(size=(1,))}[shape_b].astype(np.float32)
    at, bt = tensor(a, dtype), tensor(b, dtype)
    op = getattr(ops, name)
    fast = run_guarded(lambda out: op(at, bt, out=out, device=device), a.shape, dtype, name)
    ref = run_guarded(lambda out: op(at, bt, out=out, reference=True), a.shape, dtype, name)
    assert_close(fast, ref, dtype, what=f"{name} {dtype}: {device} vs reference")
    fn = np.add if name == "add" else np.multiply
    assert_close(ref, fn(round_to(a, dtype), round_to(b, dtype)), dtype, what=f"{name} {dtype}: reference vs numpy")


def test_binary_in_place():
    a = np.arange(10, dtype=np.float32)
    at = mb.Tensor(a)
    ops.add(at, np.ones(10, np.float32), out=at)
    np.testing.assert_array_equal(a, np.arange(10, dtype=np.float32) + 1)


def test_nan_propagates():
    x = np.array([np.nan, 1.0], np.float32)
    for call, _ in UNARY.values():
        assert np.isnan(call(x).numpy()[0])
        assert np.isnan(call(x, reference=True).numpy()[0])


@pytest.mark.parametrize("bad", [
    lambda: ops.add(np.ones(3, np.float32), np.ones(4, np.float32)),
    lambda: ops.add(np.ones(3, np.float32), mb.Tensor(np.ones(3, np.float32), dtype="bf16")),
    lambda: ops.gelu_tanh(np.ones(3, np.int32)),
    lambda: ops.gelu_tanh(np.ones(3, np.float64)),
    lambda: ops.gelu_tanh(np.ones(3, np.float32), out=np.ones(4, np.float32)),
    lambda: ops.softcap(np.ones(3, np.float32), 0.0),
    lambda: ops.clamp(np.ones(3, np.float32), 1.0, -1.0),
    lambda: ops.relu(np.ones((3, 4), np.float32)[:, ::2]),
])
def test_bad_input(bad):
    with pytest.raises(mb.InputError):
        bad()


def test_partial_alias_rejected():
    buf = np.zeros(8, np.float32)
    t = mb.Tensor(buf)
    with pytest.raises(mb.InputError, match="overlaps"):
        ops.relu(t.slice(0, 0, 4), out=t.slice(0, 2, 6))


def test_unavailable_and_unknown_devices():
    if "metal" not in mb.devices():
        # The refusal says why: this build has no Metal launcher (it is built only on macOS).
        with pytest.raises(mb.DeviceError, match="device 'metal' is not available: this markbase was built without "
                                                 "the Metal launcher"):
            ops.relu(np.ones(3, np.float32), device="metal")
    with pytest.raises(mb.DeviceError, match="unknown device 'cuda'"):
        ops.relu(np.ones(3, np.float32), device="cuda")
