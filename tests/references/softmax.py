"""Shared by tests/ops/test_softmax.py and tests/metal/test_sim_softmax.py."""

import math

import numpy as np

from parity import TOL


def tol(dtype, D):
    """Per-dtype element threshold plus 2^-23·√D for the f32 sum of D exponentials.

    Every output is e_i / Σe; the sequential f32 sum's relative error is ~2^-24·√(D/3) (random rounding),
    and the fast kernels' e^x is within ~2 ulp (2.4e-7) of std::exp, inside the f32 rtol; a simd /
    threadgroup tree (Metal) sums in another order, which the same 2^-23·√D covers.
    """
    r, a = TOL[dtype]
    extra = 2.0**-23 * math.sqrt(D)
    return r + extra, a + extra


def make_input(r, shape):
    """N(0, 4) logits with one −inf (masked) column and one far below the row's max."""
    x = r.normal(0, 4, size=shape).astype(np.float32)
    flat = x.reshape(-1, shape[-1])
    D = shape[-1]
    if D > 1:
        flat[:, D // 2] = -np.inf  # masked entries (an attention mask) contribute exactly 0
        flat[:, -1] -= 100.0       # e^(x − max) far below the f32 normal range: ~0, never NaN
    return x


def shapes(D):
    """One row, a few rows, a rank-3 batch."""
    return [(D,), (3, D), (2, 17, D)]
