"""Elementwise on metal-sim: the Metal kernels (metal/elementwise.metal) against the CPU scalar reference, with
the thresholds of tests/ops/test_elementwise.py (tests/parity.py). The unary grid here adds an input near 0
(log1p's small-argument accuracy) that tests/ops does not have; NaN / Inf propagation, in place, empty and bad
input follow. The binary (add / mul) grid runs in tests/ops/test_elementwise.py on every device, metal-sim
included."""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import FLOAT_DTYPES, SIZES, device_vs_reference, rng, tensor
from references.elementwise import UNARY

from .sim import require_sim

DEVICE = "metal-sim"


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_parity(name, dtype, n):
    require_sim()
    call, _ = UNARY[name]
    x = rng(n).normal(0, 4, size=(n,)).astype(np.float32)
    x[0] = 30.0 if n > 1 else x[0]  # softplus' linear branch and saturating tails
    if n > 2:
        x[1] = -1e-4  # softplus / sigmoid near 0: log1p's small-argument accuracy
    xt = tensor(x, dtype)
    device_vs_reference(lambda **kw: call(xt, **kw), (n,), dtype, DEVICE, f"{name} {dtype} n={n}")


@pytest.mark.parametrize("name", sorted(UNARY))
def test_nan_propagates(name):
    require_sim()
    x = np.array([np.nan, 1.0, -np.inf, np.inf], np.float32)
    call, _ = UNARY[name]
    got = call(x, device=DEVICE).numpy()
    ref = call(x, reference=True).numpy()
    assert np.isnan(got[0])
    np.testing.assert_array_equal(got[1:], ref[1:])


def test_in_place():
    require_sim()
    a = np.arange(10, dtype=np.float32)
    at = mb.Tensor(a)
    ops.add(at, np.ones(10, np.float32), out=at, device=DEVICE)
    np.testing.assert_array_equal(a, np.arange(10, dtype=np.float32) + 1)
    ops.relu(at, out=at, device=DEVICE)
    np.testing.assert_array_equal(a, np.arange(10, dtype=np.float32) + 1)


def test_empty_tensor():
    require_sim()
    got = ops.silu(np.zeros(0, np.float32), device=DEVICE)
    assert got.numpy().shape == (0,)


def test_bad_input_is_still_an_input_error():
    require_sim()
    with pytest.raises(mb.InputError, match="add"):
        ops.add(np.ones(3, np.float32), np.ones(4, np.float32), device=DEVICE)
