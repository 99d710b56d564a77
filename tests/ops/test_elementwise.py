"""Parity grid for the elementwise ops (see tests/parity.py for the thresholds)."""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import FLOAT_DTYPES, SIZES, assert_close, device_vs_reference, rng, round_to, tensor
from references.elementwise import UNARY, binary_inputs


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_parity(name, dtype, n, device):
    call, ref_np = UNARY[name]
    x = rng(n).normal(0, 4, size=(n,)).astype(np.float32)
    x[0] = 30.0 if n > 1 else x[0]  # exercises softplus' linear branch and saturating tails
    xt = tensor(x, dtype)
    _, ref = device_vs_reference(lambda **kw: call(xt, **kw), (n,), dtype, device, f"{name} {dtype} n={n}")
    assert_close(ref, ref_np(round_to(x, dtype)), dtype, what=f"{name} {dtype} n={n}: reference vs numpy")


@pytest.mark.parametrize("shape_b", ["same", "row", "scalar"])
@pytest.mark.parametrize("n", [1, 33, 4097])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name", ["add", "mul"])
def test_binary_parity(name, dtype, n, shape_b, device):
    a, b = binary_inputs(n, shape_b)
    at, bt = tensor(a, dtype), tensor(b, dtype)
    op = getattr(ops, name)
    _, ref = device_vs_reference(lambda **kw: op(at, bt, **kw), a.shape, dtype, device, f"{name} {dtype}")
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
