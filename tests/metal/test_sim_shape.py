"""copy / concat parity on metal-sim: the strided copy kernels (metal/shape.metal) against numpy and the
CPU reference. As in tests/ops/test_shape.py every comparison is bit for bit: same-dtype copies move bits
(NaN payloads, Inf, subnormals included), conversions round to nearest even exactly like the CPU."""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import bf16_bits_to_f32, f32_to_bf16_bits, rng, run_guarded

from .sim import require_sim

DEVICE = "metal-sim"
ALL_DTYPES = ["f32", "bf16", "f16", "i32", "i64", "u8", "bool"]
FLOATS = ["f32", "bf16", "f16"]
STORAGE = {"f32": np.float32, "bf16": np.uint16, "f16": np.float16, "i32": np.int32, "i64": np.int64,
           "u8": np.uint8, "bool": np.bool_}


def random_array(shape, dtype, seed):
    """Random bit patterns (floats: NaN payloads, Inf, subnormals), which a same-dtype copy must keep."""
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


def assert_bits_equal(got, want, what):
    g, w = np.ascontiguousarray(got), np.ascontiguousarray(want)
    assert g.shape == w.shape, f"{what}: shape {g.shape} != {w.shape}"
    gb, wb = g.view(np.uint8).reshape(g.shape + (-1,)), w.view(np.uint8).reshape(w.shape + (-1,))
    if not np.array_equal(gb, wb):
        i = tuple(np.argwhere(gb != wb)[0][:-1])
        raise AssertionError(f"{what}: differs at {i}: got {g[i]!r}, want {w[i]!r}")


def check_copy(src, want, dtype, what):
    require_sim()
    for kw in (dict(device=DEVICE), dict(reference=True)):
        got = run_guarded(lambda out: ops.copy(src, out=out, **kw), want.shape, dtype, what)
        assert_bits_equal(got.numpy(), want, f"{what} {kw}")


# (name, base shape, markbase view, numpy view of the same array); "numpy view" cases hand numpy's
# strided view (negative strides too) to markbase directly.
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
    # More than 4 dimensions left after coalescing: the dispatch walks the outer ones.
    ("5d permute", (2, 3, 5, 4, 7), lambda t: t.permute([4, 2, 0, 3, 1]), lambda a: a.transpose(4, 2, 0, 3, 1)),
    ("6d permute", (3, 2, 3, 2, 5, 3), lambda t: t.permute([5, 3, 1, 4, 2, 0]),
     lambda a: a.transpose(5, 3, 1, 4, 2, 0)),
    ("0d select", (5,), lambda t: t.select(0, 3), lambda a: a[3]),
]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("name,shape,tview,nview", VIEWS, ids=[v[0] for v in VIEWS])
def test_copy_view_exact(name, shape, tview, nview, dtype):
    a = random_array(shape, dtype, seed=len(name) + len(dtype))
    src = tview(as_tensor(nview(a), dtype)) if "numpy view" in name else tview(as_tensor(a, dtype))
    want = nview(a)
    assert tuple(src.shape) == want.shape
    check_copy(src, want, dtype, f"copy {name} {dtype}")


@pytest.mark.parametrize("dtype", ["f32", "bf16", "u8", "i64"])
def test_copy_larger(dtype):
    # Several threadgroups per dispatch with strided reads (a transposed 257×513 matrix).
    a = random_array((257, 513), dtype, seed=3)
    check_copy(as_tensor(a, dtype).transpose(0, 1), a.T, dtype, f"copy 513x257 transpose {dtype}")


def to_float32_np(a, dtype):
    return bf16_bits_to_f32(a) if dtype == "bf16" else a.astype(np.float32)


def from_float32_np(v, dtype):
    """float32 values rounded to nearest even into dtype storage, independently of markbase."""
    if dtype == "bf16":
        return f32_to_bf16_bits(v)
    with np.errstate(over="ignore"):
        return v.astype(STORAGE[dtype])


def special_values(shape, dtype, seed):
    """Values across many magnitudes plus Inf, NaN, subnormals, f16 overflow and exact rounding ties."""
    r = rng(seed)
    n = int(np.prod(shape))
    v = (r.normal(size=n) * np.exp2(r.integers(-30, 30, size=n))).astype(np.float32)
    specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 65504, 65520, 1e6, -7e4, 2.0**-24, 2.0**-25, 3e-8,
                         1e-40, -1e-45, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-11, 3.4e38, 2.0**-14,
                         2.0**-14 - 2.0**-25, 5.96e-8, -6.1e-5], np.float32)
    v[: min(n, len(specials))] = specials[: min(n, len(specials))]
    r.shuffle(v)
    return from_float32_np(v, dtype).reshape(shape)


@pytest.mark.parametrize("dst", FLOATS)
@pytest.mark.parametrize("src_dtype", FLOATS)
@pytest.mark.parametrize("shape,tview,nview", [
    ((33, 31), lambda t: t.transpose(0, 1), lambda a: a.T),
    ((2, 3, 31, 32), lambda t: t.slice(3, 1, 31).permute([0, 2, 1, 3]), lambda a: a[..., 1:31].transpose(0, 2, 1, 3)),
    ((65, 129), lambda t: t, lambda a: a),
])
def test_copy_converts_exactly(shape, tview, nview, src_dtype, dst):
    a = special_values(shape, src_dtype, seed=len(shape))
    src = tview(as_tensor(a, src_dtype))
    want = from_float32_np(to_float32_np(nview(a), src_dtype), dst)
    check_copy(src, want, dst, f"copy {src_dtype}->{dst} {shape}")
    got = ops.copy(src, dtype=dst, device=DEVICE)
    assert got.dtype == dst
    assert_bits_equal(got.numpy(), want, f"copy {src_dtype}->{dst} {shape} (dtype=)")


@pytest.mark.parametrize("src_dtype,dst", [("f16", "f32"), ("f16", "bf16"), ("bf16", "f32"), ("bf16", "f16"),
                                           ("f32", "f16"), ("f32", "bf16")])
def test_convert_every_bit_pattern_like_the_cpu(src_dtype, dst):
    # Random bit patterns (NaN payloads, subnormals of every width) converted: identical to the CPU.
    require_sim()
    a = random_array((4099,), src_dtype, seed=11)
    src = as_tensor(a, src_dtype)
    sim = run_guarded(lambda out: ops.copy(src, out=out, device=DEVICE), a.shape, dst, "convert metal-sim")
    ref = run_guarded(lambda out: ops.copy(src, out=out, reference=True), a.shape, dst, "convert reference")
    assert_bits_equal(sim.numpy(), ref.numpy(), f"copy {src_dtype}->{dst} random bits: metal-sim vs reference")


# (shapes of the parts before the view, markbase view, numpy view, dim).
CONCATS = [
    ([(3, 5), (4, 5), (1, 5)], lambda t: t, lambda a: a, 0),
    ([(3, 5), (3, 1), (3, 33)], lambda t: t, lambda a: a, -1),
    ([(5, 3), (33, 3)], lambda t: t.transpose(0, 1), lambda a: a.T, 1),
    ([(2, 31, 4), (2, 1, 4), (2, 0, 4)], lambda t: t, lambda a: a, 1),
    ([(2, 3, 8)], lambda t: t.permute([2, 0, 1]), lambda a: a.transpose(2, 0, 1), 0),
    ([(2, 4, 3, 32), (2, 4, 5, 32)], lambda t: t.permute([0, 2, 1, 3]), lambda a: a.transpose(0, 2, 1, 3), 1),
    ([(1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4)], lambda t: t, lambda a: a, 3),
    ([(2, 3, 2, 3, 5), (2, 3, 2, 3, 2)], lambda t: t.permute([0, 3, 1, 2, 4]), lambda a: a.transpose(0, 3, 1, 2, 4), 4),
    ([(40, 257), (33, 257)], lambda t: t, lambda a: a, 0),
]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shapes,tview,nview,dim", CONCATS)
def test_concat_exact(shapes, tview, nview, dim, dtype):
    require_sim()
    arrays = [random_array(s, dtype, seed=i + 11) for i, s in enumerate(shapes)]
    tensors = [tview(as_tensor(a, dtype)) for a in arrays]
    want = np.concatenate([nview(a) for a in arrays], axis=dim)
    what = f"concat {shapes} dim {dim} {dtype}"
    for kw in (dict(device=DEVICE), dict(reference=True)):
        got = run_guarded(lambda out: ops.concat(tensors, dim, out=out, **kw), want.shape, dtype, what)
        assert_bits_equal(got.numpy(), want, f"{what} {kw}")


def test_empty_copy():
    require_sim()
    assert ops.copy(np.zeros((0, 3), np.float32), device=DEVICE).numpy().shape == (0, 3)


def test_bad_input_is_still_an_input_error():
    require_sim()
    with pytest.raises(mb.InputError, match="copy: .*out"):
        ops.copy(np.ones((2, 3), np.float32), out=np.ones((3, 2), np.float32), device=DEVICE)
    with pytest.raises(mb.InputError, match=r"concat: .*tensors\[1\]"):
        ops.concat([np.ones((2, 3), np.float32), np.ones((2, 4), np.float32)], 0, device=DEVICE)
