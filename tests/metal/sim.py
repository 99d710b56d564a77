"""Shared helpers of the metal-sim tests: they FAIL (never skip) when metal-sim is not built."""

from __future__ import annotations

import struct

import numpy as np

import markbase as mb
from markbase import _core

NOT_BUILT = ("metal-sim is not built into this markbase: it needs clang++ 22 or newer at build time "
             "(apt install clang-22, then rebuild; CMake option MARKBASE_METAL_SIM)")


def require_sim():
    assert _core.metal_sim_built(), NOT_BUILT
    return _core.metal_sim


def run(name, buffers, grid, group, args=b"", read_only=()):
    """Dispatches a registered kernel: buffers[i] is [[buffer(i)]] (numpy arrays, written in place)."""
    sim = require_sim()
    sim.run_test_kernel(name, list(buffers), list(grid), list(group), args=args, read_only=list(read_only))


def pack_args(n: int, m: int = 0) -> bytes:
    """struct TestArgs { uint n; uint m; } of metal/tests/sim_selftest.metal."""
    return struct.pack("<II", n, m)


def integers(n, lo=-50, hi=50, seed=0):
    """Integer-valued float32: sums of a few thousand of them are exact in any order."""
    return np.random.default_rng(seed).integers(lo, hi, size=n).astype(np.float32)


DeviceError = mb.DeviceError
