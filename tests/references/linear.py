"""Shared by tests/ops/test_linear.py and tests/metal/test_sim_linear.py.

Threshold (derived in tests/ops/test_linear.py's docstring): per element
|got − want| <= RTOL[out dtype]·|want| + 4·sqrt(K+1)·u·S, u = 2^-24, S = Σ_k |x_k·w_k| + |b|.
"""

import numpy as np

from parity import rng, round_to, to_f64

U32 = 2.0**-24  # f32 unit roundoff
RTOL = {"f32": 2.0**-23, "bf16": 2.0**-7}
X_DTYPES = ["f32", "bf16"]
W_DTYPES = ["f32", "bf16", "f16"]


def make_inputs(M, K, N, with_bias, seed=0):
    r = rng(seed + 7 * M + 13 * K + N)
    x = r.normal(0, 1, size=(M, K)).astype(np.float32)
    w = r.normal(0, 1, size=(N, K)).astype(np.float32)
    b = r.normal(0, 1, size=(N,)).astype(np.float32) if with_bias else None
    return x, w, b


def numpy_linear(x, w, b, x_dtype, w_dtype, b_dtype):
    """float64 reference from the dtype-rounded inputs, and the error scale S = |x|·|w|ᵀ + |b|."""
    x64, w64 = round_to(x, x_dtype), round_to(w, w_dtype)
    want = x64 @ w64.T
    scale = np.abs(x64) @ np.abs(w64).T
    if b is not None:
        b64 = round_to(b, b_dtype)
        want = want + b64
        scale = scale + np.abs(b64)
    return want, scale


def assert_linear_close(got, want, scale, K, out_dtype, what):
    g, w = to_f64(got), to_f64(want)
    assert g.shape == w.shape, f"{what}: shape {g.shape} != {w.shape}"
    assert np.isfinite(w).all(), f"{what}: expected values are not finite"
    if not np.isfinite(g).all():
        raise AssertionError(f"{what}: {np.sum(~np.isfinite(g))} NaN/Inf elements (unwritten output?)")
    err = np.abs(g - w)
    limit = RTOL[out_dtype] * np.abs(w) + 4.0 * np.sqrt(K + 1) * U32 * scale
    if not (err <= limit).all():
        i = np.unravel_index(np.argmax(err - limit), err.shape)
        raise AssertionError(f"{what}: mismatch at {i}: got {g[i]!r}, want {w[i]!r}, |err| {err[i]:.3g} > "
                             f"{limit[i]:.3g} (S = {scale[i]:.3g})")
