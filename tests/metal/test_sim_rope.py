"""rope / rope_2d on metal-sim: the Metal-specific cases (a token spanning two threadgroups, reversed tokens
with strided positions, in place for every dtype, rope_2d at d = 128 and with a sliced x, input errors) against the
CPU scalar reference, with the thresholds of tests/ops/test_rope.py (the per-dtype defaults of tests/parity.py).
The general parity grid (every table kind, head dim, head count and dtype, explicit positions, sliced and
transposed x, rope_2d at d = 64 / 72) runs in tests/ops/test_rope.py on every device, metal-sim included.

Both sides form the angle as one f32 multiply f32(pos) · inv_freq and rotate with the same f32 products;
they differ only if the sim's precise::cos / sin and the CPU's std::cos / sin differ (≤ 1 ulp each), which
the f32 threshold covers. Dims the rotation must not touch (≥ d_rot) are compared bit for bit."""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import FLOAT_DTYPES, device_vs_reference, rng, tensor
from references.rope import POSITIONS, vision_positions

from .sim import require_sim

DEVICE = "metal-sim"


def sim_and_ref(call, shape, dtype, what):
    return device_vs_reference(call, shape, dtype, DEVICE, what)


def test_rope_many_pairs_span_several_threadgroups():
    """d_rot / 2 = 384 pairs > 256 threads per group: a token spans two threadgroups (args.groups_per_token)."""
    require_sim()
    d = 1024
    inv = ops.rope_inv_freq("default", d, 1e4, 0.75)
    pos = np.array([3, 0, 99999, 12], np.int32)
    x = rng(16).normal(size=(len(pos), 2, d)).astype(np.float32)
    sim, _ = sim_and_ref(lambda **kw: ops.rope(x, pos, inv, **kw), x.shape, "f32", "rope d=1024")
    np.testing.assert_array_equal(sim.numpy()[..., 2 * len(inv):], x[..., 2 * len(inv):])


def test_rope_reversed_tokens_and_strided_positions():
    """Tokens in reverse order (a negative stride) and a strided positions view; the sliced and transposed
    layouts run in tests/ops/test_rope.py on every device."""
    require_sim()
    T, H, d = 9, 3, 128
    inv = ops.rope_inv_freq("proportional", d, 1e6, 0.25)
    r = rng(13)
    x = r.normal(size=(T, H, d)).astype(np.float32)[::-1]
    pos = np.stack([POSITIONS, POSITIONS + 5])[0, ::-1]
    xt = mb.Tensor(x)
    assert not xt.is_contiguous()
    sim_and_ref(lambda **kw: ops.rope(xt, pos, inv, **kw), x.shape, "f32", "rope reversed-positions")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_in_place(dtype):
    require_sim()
    x = rng(14).normal(size=(len(POSITIONS), 4, 72)).astype(np.float32)
    inv = ops.rope_inv_freq("default", 72, 1e4, 0.5)
    want = ops.rope(tensor(x, dtype), POSITIONS, inv, device=DEVICE).to_float32()
    xt = tensor(x, dtype)
    ops.rope(xt, POSITIONS, inv, out=xt, device=DEVICE)
    np.testing.assert_array_equal(xt.to_float32(), want)
    pos2 = np.stack([POSITIONS, POSITIONS[::-1]], axis=1)
    want2 = ops.rope_2d(tensor(x, dtype), pos2, 100.0, device=DEVICE).to_float32()
    xt = tensor(x, dtype)
    ops.rope_2d(xt, pos2, 100.0, out=xt, device=DEVICE)
    np.testing.assert_array_equal(xt.to_float32(), want2)


@pytest.mark.parametrize("H", [1, 3, 8])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_rope_2d_parity_d128(dtype, H):
    """d = 128 (32 pairs per axis); d = 64 and 72 run in tests/ops/test_rope.py on every device."""
    require_sim()
    d = 128
    pos = vision_positions(np.int64)
    x = rng(d + H).normal(size=(len(pos), H, d)).astype(np.float32)
    xt = tensor(x, dtype)
    sim_and_ref(lambda **kw: ops.rope_2d(xt, pos, 100.0, **kw), x.shape, dtype, f"rope_2d {dtype} d={d} H={H}")


@pytest.mark.parametrize("pdtype", [np.int32, np.int64])
def test_rope_2d_positions_and_theta(pdtype):
    require_sim()
    # Large and negative coordinates, another θ, and a strided view of the positions ((y, x) columns swapped),
    # and a sliced x.
    r = rng(15)
    yx = r.integers(-50, 4000, size=(23, 2)).astype(pdtype)
    pos = yx[:, ::-1]
    x = r.normal(size=(23, 2, 80)).astype(np.float32)[:, :, 8:72]
    sim_and_ref(lambda **kw: ops.rope_2d(x, pos, 1e4, **kw), x.shape, "f32", f"rope_2d {pdtype.__name__}")


def test_empty_and_bad_input():
    require_sim()
    inv = np.ones(4, np.float32)
    with pytest.raises(mb.InputError, match="^rope: .*inv_freq"):
        ops.rope(np.ones((4, 2, 8), np.float32), np.arange(4), np.ones(5, np.float32), device=DEVICE)
    with pytest.raises(mb.InputError, match="^rope_2d: .*positions"):
        ops.rope_2d(np.ones((4, 2, 8), np.float32), np.zeros((4, 3), np.int32), 100.0, device=DEVICE)
    t = mb.Tensor(np.zeros((5, 2, 8), np.float32))
    with pytest.raises(mb.InputError, match="rope: out overlaps input x"):
        ops.rope(t.slice(0, 0, 4), np.arange(4), inv, out=t.slice(0, 1, 5), device=DEVICE)
