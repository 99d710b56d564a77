"""Tests for the materialising shape ops: copy (a strided view → contiguous, with f32/bf16/f16 conversion)
and concat. Copies are exact, so every comparison here is bit-for-bit against numpy."""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import bf16_bits_to_f32, f32_to_bf16_bits, rng, run_guarded

ALL_DTYPES = ["f32", "bf16", "f16", "i32", "i64", "u8", "bool"]
FLOATS = ["f32", "bf16", "f16"]
STORAGE = {"f32": np.float32, "bf16": np.uint16, "f16": np.float16, "i32": np.int32, "i64": np.int64,
           "u8": np.uint8, "bool": np.bool_}


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


# Views: (name, base shape, markbase view of a Tensor, numpy view of the same array).
VIEWS = [
    ("2d transpose", (33, 31), lambda t: t.transpose(0, 1), lambda a: a.T),
    ("2d slice cols", (32, 33), lambda t: t.slice(1, 3, 30), lambda a: a[:, 3:30]),
    ("2d slice+transpose", (31, 32), lambda t: t.slice(0, 1, 30).transpose(0, 1), lambda a: a[1:30].T),
    ("2d select row", (3, 257), lambda t: t.select(0, 2), lambda a: a[2]),
    ("2d select col", (257, 3), lambda t: t.select(1, -1), lambda a: a[:, -1]),
    ("2d step (numpy view)", (33, 64), lambda t: t, lambda a: a[:, ::2]),
    ("2d reversed (numpy view)", (31, 33), lambda t: t, lambda a: a[::-1, ::-3]),
    ("3d permute", (3, 32, 33), lambda t: t.permute([2, 0, 1]), lambda a: a.transpose(2, 0, 1)),
    ("3d slice+transpose", (5, 31, 32), lambda t: t.slice(0, 1, 4).transpose(1, 2), lambda a: a[1:4].transpose(0, 2, 1)),
    ("3d reshape+transpose", (4, 6, 33), lambda t: t.reshape([24, 33]).transpose(0, 1), lambda a: a.reshape(24, 33).T),
    ("4d heads swap", (2, 33, 4, 32), lambda t: t.permute([0, 2, 1, 3]), lambda a: a.transpose(0, 2, 1, 3)),
    ("4d reverse", (2, 3, 31, 32), lambda t: t.permute([3, 2, 1, 0]), lambda a: a.transpose(3, 2, 1, 0)),
    ("4d slice+select", (2, 3, 33, 31), lambda t: t.slice(2, 5, 33).select(1, 1).transpose(0, 2),
     lambda a: a[:, 1, 5:33].transpose(2, 1, 0)),
    ("4d contiguous", (2, 3, 4, 33), lambda t: t, lambda a: a),
    ("4d size-1 dims", (1, 33, 1, 31), lambda t: t.permute([3, 2, 1, 0]), lambda a: a.transpose(3, 2, 1, 0)),
]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("name,shape,tview,nview", VIEWS, ids=[v[0] for v in VIEWS])
def test_copy_view_exact(name, shape, tview, nview, dtype, device):
    a = random_array(shape, dtype, seed=len(name) + len(dtype))
    src = tview(as_tensor(nview(a), dtype)) if "numpy view" in name else tview(as_tensor(a, dtype))
    want = nview(a)
    assert src.shape == want.shape
    what = f"copy {name} {dtype}"
    for kw in (dict(device=device), dict(reference=True)):
        got = run_guarded(lambda out: ops.copy(src, out=out, **kw), want.shape, dtype, what)
        assert got.is_contiguous()
        assert_bits_equal(got.numpy(), want, f"{what} {kw}")


@pytest.mark.parametrize("shape,nview", [
    ((1 << 21,), lambda a: a),                    # one long dense run (split across threads)
    ((1 << 22,), lambda a: a[::2]),              # one long strided run
    ((257, 4097), lambda a: a.T),                # many strided rows
    ((4097, 257), lambda a: a[:, 1:256]),        # many dense rows
    ((8, 64, 16, 128), lambda a: a.transpose(0, 2, 1, 3)),
])
@pytest.mark.parametrize("dtype", ["f32", "bf16", "u8"])
def test_copy_large_parallel(shape, nview, dtype, device):
    a = random_array(shape, dtype, seed=3)
    want = nview(a)
    src = as_tensor(want, dtype)
    got = ops.copy(src, device=device)
    assert_bits_equal(got.numpy(), want, f"large copy {shape} {dtype}")


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
    """Normal values across many magnitudes plus Inf, NaN, subnormals, values that overflow f16 and exact
    rounding ties, stored in dtype."""
    r = rng(seed)
    n = int(np.prod(shape))
    v = (r.normal(size=n) * np.exp2(r.integers(-30, 30, size=n))).astype(np.float32)
    specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 65504, 65520, 1e6, -7e4, 2.0**-24, 2.0**-25, 3e-8,
                         1e-40, -1e-45, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-11, 3.4e38], np.float32)
    v[: min(n, len(specials))] = specials[: min(n, len(specials))]
    r.shuffle(v)
    return from_float32_np(v, dtype).reshape(shape)


@pytest.mark.parametrize("dst", FLOATS)
@pytest.mark.parametrize("src_dtype", FLOATS)
@pytest.mark.parametrize("shape,tview,nview", [
    ((33, 31), lambda t: t.transpose(0, 1), lambda a: a.T),
    ((3, 32, 33), lambda t: t.permute([1, 2, 0]), lambda a: a.transpose(1, 2, 0)),
    ((2, 3, 31, 32), lambda t: t.slice(3, 1, 31).permute([0, 2, 1, 3]), lambda a: a[..., 1:31].transpose(0, 2, 1, 3)),
    ((257, 4097), lambda t: t, lambda a: a),
])
def test_copy_converts_exactly(shape, tview, nview, src_dtype, dst, device):
    a = special_values(shape, src_dtype, seed=len(shape))
    src = tview(as_tensor(a, src_dtype))
    want = from_float32_np(to_float32_np(nview(a), src_dtype), dst)
    what = f"copy {src_dtype}->{dst} {shape}"
    for kw in (dict(device=device), dict(reference=True)):
        got = run_guarded(lambda out: ops.copy(src, out=out, **kw), want.shape, dst, what)
        assert_bits_equal(got.numpy(), want, f"{what} {kw}")
    got = ops.copy(src, dtype=dst, device=device)
    assert got.dtype == dst
    assert_bits_equal(got.numpy(), want, f"{what} (dtype=)")


# Concat cases: (shapes of the parts before the view, markbase view, numpy view, dim).
CONCATS = [
    ([(3, 5), (4, 5), (1, 5)], lambda t: t, lambda a: a, 0),
    ([(3, 5), (3, 1), (3, 33)], lambda t: t, lambda a: a, -1),
    ([(5, 3), (33, 3)], lambda t: t.transpose(0, 1), lambda a: a.T, 1),                        # strided parts
    ([(2, 31, 4), (2, 1, 4), (2, 0, 4)], lambda t: t, lambda a: a, 1),                         # an empty part
    ([(2, 3, 8)], lambda t: t.permute([2, 0, 1]), lambda a: a.transpose(2, 0, 1), 0),            # one part
    ([(2, 4, 3, 32), (2, 4, 5, 32)], lambda t: t.permute([0, 2, 1, 3]), lambda a: a.transpose(0, 2, 1, 3), 1),
    ([(1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4)], lambda t: t, lambda a: a, 3),
    ([(300, 1024), (257, 1024)], lambda t: t, lambda a: a, 0),                                   # large
]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shapes,tview,nview,dim", CONCATS)
def test_concat_exact(shapes, tview, nview, dim, dtype, device):
    arrays = [random_array(s, dtype, seed=i + 11) for i, s in enumerate(shapes)]
    tensors = [tview(as_tensor(a, dtype)) for a in arrays]
    want = np.concatenate([nview(a) for a in arrays], axis=dim)
    what = f"concat {shapes} dim {dim} {dtype}"
    for kw in (dict(device=device), dict(reference=True)):
        got = run_guarded(lambda out: ops.concat(tensors, dim, out=out, **kw), want.shape, dtype, what)
        assert_bits_equal(got.numpy(), want, f"{what} {kw}")
    assert_bits_equal(ops.concat(tensors, dim).numpy(), want, f"{what} (fresh out)")


def test_concat_accepts_numpy_arrays():
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((1, 3), np.float32)
    np.testing.assert_array_equal(ops.concat([a, b], 0).numpy(), np.concatenate([a, b]))


F = np.float32


@pytest.mark.parametrize("bad,words", [
    (lambda: ops.copy(np.ones((2, 3), F), out=np.ones((3, 2), F)), ["copy:", "out"]),
    (lambda: ops.copy(np.ones((2, 3), np.int32), out=np.ones((2, 3), F)), ["copy:", "src", "i32"]),
    (lambda: ops.copy(np.ones((2, 3), F), out=np.ones((2, 3), np.int64)), ["copy:", "out", "i64"]),
    (lambda: ops.copy(np.ones((2, 3), F), out=np.ones((2, 6), F)[:, ::2]), ["copy:", "out", "contiguous"]),
    (lambda: ops.copy(np.ones((2, 3), F), out=np.ones((2, 3), F), dtype="f16"), ["copy:", "out", "f16"]),
    (lambda: ops.concat([], 0), ["concat:", "empty"]),
    (lambda: ops.concat([np.ones((2, 3), F), np.ones((2, 3), np.float16)], 0), ["concat:", "tensors[1]", "dtype"]),
    (lambda: ops.concat([np.ones((2, 3), F), np.ones((2, 4), F)], 0), ["concat:", "tensors[1]", "dimension 1"]),
    (lambda: ops.concat([np.ones((2, 3), F), np.ones((2, 3, 1), F)], 0), ["concat:", "tensors[1]", "rank"]),
    (lambda: ops.concat([np.ones((2, 3), F)], 2), ["concat:", "dim 2"]),
    (lambda: ops.concat([np.ones((2, 3), F)], 0, out=np.ones((3, 3), F)), ["concat:", "out"]),
])
def test_bad_input(bad, words):
    with pytest.raises(mb.InputError) as e:
        bad()
    for w in words:
        assert w in str(e.value), str(e.value)


def test_read_only_out_rejected():
    ro = np.zeros((2, 3), F)
    ro.flags.writeable = False
    with pytest.raises(mb.InputError, match="copy: out is read-only"):
        ops.copy(np.ones((2, 3), F), out=ro)
    with pytest.raises(mb.InputError, match="concat: out is read-only"):
        ops.concat([np.ones((1, 3), F), np.ones((1, 3), F)], 0, out=ro)


def test_overlap_rejected():
    buf = mb.Tensor(np.arange(12, dtype=F).reshape(3, 4))
    with pytest.raises(mb.InputError, match="overlaps"):
        ops.copy(buf.slice(0, 0, 2), out=buf.slice(0, 1, 3))
    with pytest.raises(mb.InputError, match="overlaps input tensors\\[1\\]"):
        ops.concat([np.ones((1, 4), F), buf.slice(0, 1, 2)], 0, out=buf.slice(0, 0, 2).reshape([2, 4]))
