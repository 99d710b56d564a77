"""Shared by tests/ops/test_shape.py and tests/metal/test_sim_shape.py: copies are exact, so both compare
bit for bit with numpy."""

import numpy as np

import markbase as mb
from parity import bf16_bits_to_f32, f32_to_bf16_bits, rng

ALL_DTYPES = ["f32", "bf16", "f16", "i32", "i64", "u8", "bool"]
FLOATS = ["f32", "bf16", "f16"]
STORAGE = {"f32": np.float32, "bf16": np.uint16, "f16": np.float16, "i32": np.int32, "i64": np.int64,
           "u8": np.uint8, "bool": np.bool_}

# Views: (name, base shape, markbase view of a Tensor, numpy view of the same array); "numpy view" cases
# hand numpy's strided view (negative strides too) to markbase directly. Each test file adds its own.
VIEWS = [
    ("2d transpose", (33, 31), lambda t: t.transpose(0, 1), lambda a: a.T),
    ("2d slice cols", (32, 33), lambda t: t.slice(1, 3, 30), lambda a: a[:, 3:30]),
    ("2d select col", (257, 3), lambda t: t.select(1, -1), lambda a: a[:, -1]),
    ("2d step (numpy view)", (33, 64), lambda t: t, lambda a: a[:, ::2]),
    ("2d reversed (numpy view)", (31, 33), lambda t: t, lambda a: a[::-1, ::-3]),
    ("3d permute", (3, 32, 33), lambda t: t.permute([2, 0, 1]), lambda a: a.transpose(2, 0, 1)),
    ("4d heads swap", (2, 33, 4, 32), lambda t: t.permute([0, 2, 1, 3]), lambda a: a.transpose(0, 2, 1, 3)),
    ("4d reverse", (2, 3, 31, 32), lambda t: t.permute([3, 2, 1, 0]), lambda a: a.transpose(3, 2, 1, 0)),
    ("4d slice+select", (2, 3, 33, 31), lambda t: t.slice(2, 5, 33).select(1, 1).transpose(0, 2),
     lambda a: a[:, 1, 5:33].transpose(2, 1, 0)),
    ("4d contiguous", (2, 3, 4, 33), lambda t: t, lambda a: a),
    ("4d size-1 dims", (1, 33, 1, 31), lambda t: t.permute([3, 2, 1, 0]), lambda a: a.transpose(3, 2, 1, 0)),
]

# Concat cases: (shapes of the parts before the view, markbase view, numpy view, dim). Each test file
# adds its own.
CONCATS = [
    ([(3, 5), (4, 5), (1, 5)], lambda t: t, lambda a: a, 0),
    ([(3, 5), (3, 1), (3, 33)], lambda t: t, lambda a: a, -1),
    ([(5, 3), (33, 3)], lambda t: t.transpose(0, 1), lambda a: a.T, 1),                        # strided parts
    ([(2, 31, 4), (2, 1, 4), (2, 0, 4)], lambda t: t, lambda a: a, 1),                         # an empty part
    ([(2, 3, 8)], lambda t: t.permute([2, 0, 1]), lambda a: a.transpose(2, 0, 1), 0),            # one part
    ([(2, 4, 3, 32), (2, 4, 5, 32)], lambda t: t.permute([0, 2, 1, 3]), lambda a: a.transpose(0, 2, 1, 3), 1),
    ([(1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4)], lambda t: t, lambda a: a, 3),
]


def random_array(shape, dtype, seed):
    """Random contents; float dtypes get random bit patterns (NaN payloads, Inf, subnormals included),
    which a same-dtype copy must reproduce exactly."""
    r = rng(seed)
    if dtype == "bool":
        return r.integers(0, 2, size=shape).astype(np.bool_)
    store = np.dtype(STORAGE[dtype])
    raw = r.integers(0, 256, size=(int(np.prod(shape)) * store.itemsize,), dtype=np.uint8)
    return raw.view(store).reshape(shape)


def as_tensor(a, dtype):
    """Zero-copy markbase view of a numpy array (bf16 = its uint16 bits)."""
    t = mb.Tensor(a, dtype="bf16") if dtype == "bf16" else mb.Tensor(a)
    assert t.data_ptr() == a.ctypes.data
    return t


def bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def assert_bits_equal(got, want, what):
    g, w = np.asarray(got), np.asarray(want)
    assert g.shape == w.shape, f"{what}: shape {g.shape} != {w.shape}"
    if not np.array_equal(bits(g), bits(w)):
        i = np.argwhere(bits(g).reshape(g.shape + (-1,)) != bits(w).reshape(w.shape + (-1,)))[0][:-1]
        raise AssertionError(f"{what}: differs at {tuple(i)}: got {g[tuple(i)]!r}, want {w[tuple(i)]!r}")


def to_float32_np(a, dtype):
    """Stored values as float32 (exact for every source dtype)."""
    return bf16_bits_to_f32(a) if dtype == "bf16" else a.astype(np.float32)


def from_float32_np(v, dtype):
    """float32 values rounded (to nearest even) into dtype storage, independently of markbase."""
    if dtype == "bf16":
        return f32_to_bf16_bits(v)
    with np.errstate(over="ignore"):  # values beyond 65504 become Inf in f16, as intended
        return v.astype(STORAGE[dtype])


def special_values(shape, dtype, seed):
    """Normal values across many magnitudes plus Inf, NaN, subnormals, values that overflow f16, exact
    rounding ties and f16's subnormal / normal boundary, stored in dtype."""
    r = rng(seed)
    n = int(np.prod(shape))
    v = (r.normal(size=n) * np.exp2(r.integers(-30, 30, size=n))).astype(np.float32)
    specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 65504, 65520, 1e6, -7e4, 2.0**-24, 2.0**-25, 3e-8,
                         1e-40, -1e-45, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-11, 3.4e38, 2.0**-14,
                         2.0**-14 - 2.0**-25, 5.96e-8, -6.1e-5], np.float32)
    v[: min(n, len(specials))] = specials[: min(n, len(specials))]
    r.shuffle(v)
    return from_float32_np(v, dtype).reshape(shape)
