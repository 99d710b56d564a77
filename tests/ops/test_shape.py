"""Tests for the materialising shape ops: copy (a strided view → contiguous, with f32/bf16/f16 conversion)
and concat. Copies are exact, so every comparison here is bit-for-bit against numpy."""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import run_guarded
from references.shape import (ALL_DTYPES, CONCATS, FLOATS, VIEWS, as_tensor, assert_bits_equal, from_float32_np,
                              random_array, special_values, to_float32_np)

# Views beyond the shared ones: (name, base shape, markbase view of a Tensor, numpy view of the same array).
OPS_VIEWS = VIEWS + [
    ("2d slice+transpose", (31, 32), lambda t: t.slice(0, 1, 30).transpose(0, 1), lambda a: a[1:30].T),
    ("2d select row", (3, 257), lambda t: t.select(0, 2), lambda a: a[2]),
    ("3d slice+transpose", (5, 31, 32), lambda t: t.slice(0, 1, 4).transpose(1, 2), lambda a: a[1:4].transpose(0, 2, 1)),
    ("3d reshape+transpose", (4, 6, 33), lambda t: t.reshape([24, 33]).transpose(0, 1), lambda a: a.reshape(24, 33).T),
]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("name,shape,tview,nview", OPS_VIEWS, ids=[v[0] for v in OPS_VIEWS])
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


OPS_CONCATS = CONCATS + [
    ([(300, 1024), (257, 1024)], lambda t: t, lambda a: a, 0),                                   # large
]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shapes,tview,nview,dim", OPS_CONCATS)
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
