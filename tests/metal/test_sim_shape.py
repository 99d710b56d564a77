"""copy / concat on metal-sim: the Metal-specific cases of the strided copy kernels (metal/shape.metal: views
of more than 4 dimensions, a 0-d view, multi-threadgroup copies, conversions of every bit pattern) against numpy
and the CPU reference. The shared view / concat / conversion grid runs in tests/ops/test_shape.py on every
device, metal-sim included. As in tests/ops/test_shape.py every comparison is bit for bit: same-dtype copies move bits
(NaN payloads, Inf, subnormals included), conversions round to nearest even exactly like the CPU."""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import run_guarded
from references.shape import (ALL_DTYPES, FLOATS, as_tensor, assert_bits_equal, from_float32_np,
                              random_array, special_values, to_float32_np)

from .sim import require_sim

DEVICE = "metal-sim"


def check_copy(src, want, dtype, what):
    require_sim()
    for kw in (dict(device=DEVICE), dict(reference=True)):
        got = run_guarded(lambda out: ops.copy(src, out=out, **kw), want.shape, dtype, what)
        assert_bits_equal(got.numpy(), want, f"{what} {kw}")


# Metal-specific views: more than 4 dimensions left after coalescing (the dispatch walks the outer ones) and a
# 0-d view. The shared views (references/shape.py VIEWS) run in tests/ops/test_shape.py on every device.
SIM_VIEWS = [
    ("5d permute", (2, 3, 5, 4, 7), lambda t: t.permute([4, 2, 0, 3, 1]), lambda a: a.transpose(4, 2, 0, 3, 1)),
    ("6d permute", (3, 2, 3, 2, 5, 3), lambda t: t.permute([5, 3, 1, 4, 2, 0]),
     lambda a: a.transpose(5, 3, 1, 4, 2, 0)),
    ("0d select", (5,), lambda t: t.select(0, 3), lambda a: a[3]),
]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("name,shape,tview,nview", SIM_VIEWS, ids=[v[0] for v in SIM_VIEWS])
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


@pytest.mark.parametrize("dst", FLOATS)
@pytest.mark.parametrize("src_dtype", FLOATS)
@pytest.mark.parametrize("shape,tview,nview", [
    # Several threadgroups of a contiguous conversion; the transposed / sliced conversions run in
    # tests/ops/test_shape.py on every device.
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


# Metal-specific concats (a 5-d permuted input, rows spanning threadgroups); the shared ones (references/shape.py
# CONCATS) run in tests/ops/test_shape.py on every device.
SIM_CONCATS = [
    ([(2, 3, 2, 3, 5), (2, 3, 2, 3, 2)], lambda t: t.permute([0, 3, 1, 2, 4]), lambda a: a.transpose(0, 3, 1, 2, 4), 4),
    ([(40, 257), (33, 257)], lambda t: t, lambda a: a, 0),
]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shapes,tview,nview,dim", SIM_CONCATS)
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
