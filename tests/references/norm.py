"""Shared by tests/ops/test_norm.py and tests/metal/test_sim_norm.py."""

import math

import numpy as np

from parity import TOL, round_to, tensor

# (weight dtype, bias dtype): every combination of present / absent, in each storage type.
LN_PARAMS = [(None, None), ("f32", None), (None, "f32"), ("f32", "f32"), ("bf16", "bf16"), ("f16", "f16")]


def shapes(D):
    """One row, a few rows, and a rank-3 batch with enough rows that large D spans several pool chunks.
    (On Metal, D in SIZES gives 32 to 1024 threads per threadgroup, 1 to 32 simdgroups per row.)"""
    return [(D,), (4, D), (2, 33, D)]


def tol(dtype, D):
    """(rtol, atol) for a kernel that reduces D values per row in f32.

    Both CPU kernels accumulate Σx² (or Σx, Σ(x − mean)²) in f32 (the Metal ones in a simd / threadgroup
    tree); with D terms the relative error of such a sum is ~2^-24·√(D/3) for random rounding (4097 terms:
    ~2e-6), halved again by the ^-0.5. We allow 2^-23·√D on top of the per-dtype element threshold (a 3-4σ
    margin), for both rtol and atol·scale.
    """
    r, a = TOL[dtype]
    extra = 2.0**-23 * math.sqrt(D)
    return r + extra, a + extra


def param(r, D, dtype, loc):
    """A [D] parameter stored as `dtype` (None: absent) → (argument for ops, float64 values for numpy)."""
    if dtype is None:
        return None, None
    v = r.normal(loc, 0.5, size=(D,)).astype(np.float32)
    return tensor(v, dtype), round_to(v, dtype)
