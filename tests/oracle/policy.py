"""The one precision policy of the oracle tests (README, "Precision"), at precision="f32".

The yardstick is transformers run in float64 on the same checkpoint. markbase passes when its error against
that is within F32_FACTOR × transformers-f32's own error against it (both are f32 math in some summation
order), and never above F32_CEILING. Errors are max |Δ| / max |float64|. A missing or wrong step shows as
1e-3 … 1e-1; f32 rounding as 1e-7 … 1e-5. NOISE_FLOOR keeps the multiple meaningful where transformers-f32
happens to land almost on float64 (a few rounding steps: a short encoder, a single row).
"""

from __future__ import annotations

import numpy as np

F32_FACTOR = 3.0
F32_CEILING = 2e-5
NOISE_FLOOR = 2e-6


def rel_err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def f32_limit(ref_f32, ref_f64) -> float:
    return min(F32_CEILING, F32_FACTOR * max(rel_err(ref_f32, ref_f64), NOISE_FLOOR))


def assert_f32_exact(got, ref_f32, ref_f64, what: str = "") -> float:
    """markbase's f32 result against transformers' float64 one, by the policy; returns the error."""
    got = np.asarray(got)
    assert got.shape == np.shape(ref_f64), f"{what}: shape {got.shape}, reference {np.shape(ref_f64)}"
    assert np.isfinite(got).all(), f"{what}: non-finite values"
    err, limit = rel_err(got, ref_f64), f32_limit(ref_f32, ref_f64)
    assert err <= limit, (f"{what}: error {err:.3g} against transformers-float64 > {limit:.3g} "
                          f"(transformers-f32's own: {rel_err(ref_f32, ref_f64):.3g})")
    return err
