"""Shared machinery of the op parity harness.

Every op is checked twice:
  1. the device kernel (``device=...``, fast path) against the CPU scalar reference (``reference=True``);
  2. the CPU scalar reference against numpy in float64, computed from the same (dtype-rounded) inputs.

Closeness (``assert_close``): every element must satisfy |got − want| ≤ rtol·|want| + atol·scale, where
scale = max|want| over the tensor. NaN or Inf anywhere in either side is a failure, never "equal".

Default thresholds per output storage dtype (rtol, atol):
  f32  (1e-5, 1e-6)  f32 math vs float64: a few ulp per element plus summation-order noise
  f16  (2e-3, 5e-4)  one rounding to f16 (2^-11 relative) on either side, plus f32 math
  bf16 (1.6e-2, 4e-3) one rounding to bf16 (2^-8 relative) on either side, plus f32 math
Reductions over K elements (linear, attention, norms) pass an atol that grows with K; each test says why.

Outputs are written into guarded buffers (``GuardedOut``): the output region and guard regions on both
sides start as NaN bit patterns, so an element the kernel forgot stays NaN (and fails), and a write
past either end changes a guard (and fails).
"""

from __future__ import annotations

import numpy as np

import markbase as mb

SIZES = [1, 3, 31, 32, 33, 257, 4097]
FLOAT_DTYPES = ["f32", "bf16", "f16"]
HEAD_DIMS = [64, 72, 128, 256, 512]

TOL = {"f32": (1e-5, 1e-6), "f16": (2e-3, 5e-4), "bf16": (1.6e-2, 4e-3)}

_STORAGE = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "i32": np.int32, "i64": np.int64,
            "u8": np.uint8, "bool": np.bool_}


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """x rounded to `dtype` values, returned as float64 (the numpy reference's input)."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "f32":
        return x.astype(np.float64)
    if dtype == "f16":
        return x.astype(np.float16).astype(np.float64)
    if dtype == "bf16":
        return bf16_bits_to_f32(f32_to_bf16_bits(x)).astype(np.float64)
    raise ValueError(dtype)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 → bf16 bit patterns (independent of markbase's converter)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    out = np.where(nan, (bits >> 16) | 0x40, rounded)
    return out.astype(np.uint16)


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def tensor(x: np.ndarray, dtype: str) -> mb.Tensor:
    """A markbase tensor holding x rounded to `dtype` (float inputs) or x itself (integer inputs)."""
    if dtype in ("f32", "f16", "bf16"):
        return mb.Tensor(np.ascontiguousarray(x, dtype=np.float32), dtype=dtype)
    return mb.Tensor(np.ascontiguousarray(x, dtype=_STORAGE[dtype]))


def to_f64(t) -> np.ndarray:
    """Any markbase tensor (or numpy array) as float64 numpy."""
    if isinstance(t, mb.Tensor):
        if t.dtype in ("f32", "bf16", "f16"):
            return np.asarray(t.to_float32(), dtype=np.float64)
        return np.asarray(t.numpy()).astype(np.float64)
    return np.asarray(t, dtype=np.float64)


def assert_close(got, want, dtype: str = "f32", rtol: float | None = None, atol: float | None = None,
                 what: str = "") -> None:
    g = to_f64(got)
    w = to_f64(want)
    assert g.shape == w.shape, f"{what}: shape {g.shape} != {w.shape}"
    if not np.isfinite(w).all():
        raise AssertionError(f"{what}: the expected values contain NaN/Inf ({np.sum(~np.isfinite(w))} elements)")
    if not np.isfinite(g).all():
        bad = np.argwhere(~np.isfinite(g))
        raise AssertionError(f"{what}: result has {len(bad)} NaN/Inf elements, first at {tuple(bad[0])}")
    r0, a0 = TOL[dtype]
    rtol = r0 if rtol is None else rtol
    atol = a0 if atol is None else atol
    if g.size == 0:
        return
    scale = max(float(np.max(np.abs(w))), 1e-30)
    err = np.abs(g - w)
    limit = rtol * np.abs(w) + atol * scale
    if not (err <= limit).all():
        i = np.unravel_index(np.argmax(err - limit), err.shape)
        raise AssertionError(
            f"{what}: mismatch at {tuple(int(v) for v in i)}: got {g[i]!r}, want {w[i]!r} "
            f"(|err| {err[i]:.3g} > {limit[i]:.3g}; max |err|/scale {np.max(err) / scale:.3g}, rtol {rtol}, atol {atol})")


def assert_equal(got, want, what: str = "") -> None:
    g, w = np.asarray(got), np.asarray(want)
    assert g.shape == w.shape, f"{what}: shape {g.shape} != {w.shape}"
    if not np.array_equal(g, w):
        i = np.argwhere(g != w)[0]
        raise AssertionError(f"{what}: differs at {tuple(i)}: got {g[tuple(i)]!r}, want {w[tuple(i)]!r}")


class GuardedOut:
    """An output tensor embedded in a larger buffer: guards on both sides, everything prefilled with NaN bits."""

    GUARD = 67  # odd, so guards are not vector aligned

    def __init__(self, shape, dtype: str):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        n = int(np.prod(self.shape, dtype=np.int64))
        storage = _STORAGE[dtype]
        self.buf = np.empty(n + 2 * self.GUARD, dtype=storage)
        self.buf.view(np.uint8)[:] = 0xFF  # NaN in f32 / f16 / bf16, -1 in integers
        self.pattern = self.buf[: self.GUARD].copy()
        inner = self.buf[self.GUARD: self.GUARD + n].reshape(self.shape)
        self.tensor = mb.Tensor(inner, dtype=dtype)

    def check(self, what: str = "") -> None:
        head = self.buf[: self.GUARD]
        tail = self.buf[len(self.buf) - self.GUARD:]
        assert head.tobytes() == self.pattern.tobytes(), f"{what}: write before the start of the output"
        assert tail.tobytes() == self.pattern.tobytes(), f"{what}: write past the end of the output"


def run_guarded(fn, shape, dtype: str, what: str = ""):
    """Calls fn(out=<guarded tensor>), checks the guards, returns the output tensor."""
    g = GuardedOut(shape, dtype)
    result = fn(g.tensor)
    g.check(what)
    assert result is None or result.data_ptr() == g.tensor.data_ptr(), f"{what}: op did not write into `out`"
    return g.tensor


def device_vs_reference(call, shape, dtype: str, device: str, what: str = "", rtol: float | None = None,
                        atol: float | None = None):
    """Runs call(out=..., device=device) and call(out=..., reference=True), each into a guarded output,
    asserts they are close (assert_close: rtol / atol, the dtype's defaults when None) and returns both
    output tensors (device, reference)."""
    fast = run_guarded(lambda out: call(out=out, device=device), shape, dtype, f"{what} {device}")
    ref = run_guarded(lambda out: call(out=out, reference=True), shape, dtype, f"{what} reference")
    assert_close(fast, ref, dtype, rtol, atol, what=f"{what}: {device} vs reference")
    return fast, ref
