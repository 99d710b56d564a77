"""Parity tests for avg_pool_indexed, the Gemma 4 vision pooler's 3×3 block averaging (spec §3.5)."""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import assert_close, rng
from references.pool import pool_device_vs_reference, vision_block_index


def pool_np(x, index, num_out, divisor):
    """float64: out[m] = Σ_{n: index[n] == m} x[n] / divisor."""
    out = np.zeros((num_out, x.shape[1]))
    for n, m in enumerate(index):
        if m >= 0:
            out[m] += x[n]
    return out / divisor


def check_pool(device, x, index, num_out, divisor, what):
    ref = pool_device_vs_reference(device, x, index, num_out, divisor, what)
    # At most a handful of f32 additions per element (9 for the vision pooler): f32 thresholds.
    assert_close(ref, pool_np(x.astype(np.float64), index, num_out, divisor), "f32", what=f"{what}: reference vs numpy")


# (grid_h, grid_w, max_patches): N ∈ {1, 9, 33, 2520}. 2520 = the default 280-token budget (spec §3.1
# example: 1080×1920 → 576×1056 pixels → 36×66 patches → 264 soft tokens, padded to 2520 patch rows).
VISION_GRIDS = [(1, 1, 1), (3, 3, 9), (3, 9, 33), (36, 66, 2520), (42, 60, 2520)]


@pytest.mark.parametrize("D", [1, 33, 768])
@pytest.mark.parametrize("grid_h,grid_w,max_patches", VISION_GRIDS)
def test_vision_pooler_blocks(grid_h, grid_w, max_patches, D, device):
    index = vision_block_index(grid_h, grid_w, max_patches)
    num_out = max(max_patches // 9, 1)  # output_length = max_patches / 9 (one output for the 1-patch case)
    x = rng(grid_h * grid_w + D).normal(size=(max_patches, D)).astype(np.float32)
    x[grid_h * grid_w:] = 0  # padding rows are zero in the encoder output (and skipped anyway)
    check_pool(device, x, index, num_out, 9.0, f"vision grid {grid_h}x{grid_w} N{max_patches} D{D}")
    # Row-major block order: block (by, bx) of the patch grid is output by·(grid_w/3) + bx.
    if grid_h % 3 == 0 and grid_w % 3 == 0:
        y = ops.avg_pool_indexed(x, index, num_out=num_out, divisor=9.0).numpy()
        blocks = x[: grid_h * grid_w].astype(np.float64).reshape(grid_h // 3, 3, grid_w // 3, 3, D).mean(axis=(1, 3))
        assert_close(y[: blocks.shape[0] * blocks.shape[1]], blocks.reshape(-1, D), "f32", what="3x3 block means")
        assert (y[blocks.shape[0] * blocks.shape[1]:] == 0).all(), "outputs with no member must be 0"


@pytest.mark.parametrize("D", [1, 31, 1152])
@pytest.mark.parametrize("N", [1, 9, 33, 2520])
def test_random_indices(N, D, device):
    r = rng(N * 7 + D)
    num_out = max(N // 4, 1) + 2  # some outputs get no member
    index = r.integers(-1, num_out, size=N).astype(np.int32)
    x = r.normal(size=(N, D)).astype(np.float32)
    check_pool(device, x, index, num_out, 2.5, f"random N{N} D{D}")


def test_nan_propagates_to_its_output_only():
    x = np.ones((6, 4), np.float32)
    x[2, 1] = np.nan
    index = np.array([0, 0, 1, 1, -1, 2], np.int32)
    for reference in (False, True):
        y = ops.avg_pool_indexed(x, index, num_out=3, divisor=2.0, reference=reference).numpy()
        expect_nan = np.zeros((3, 4), bool)
        expect_nan[1, 1] = True
        np.testing.assert_array_equal(np.isnan(y), expect_nan)
        np.testing.assert_array_equal(y[0], np.ones(4, np.float32))
        np.testing.assert_array_equal(y[2], np.full(4, 0.5, np.float32))


@pytest.mark.parametrize("bad_value,pos", [(5, 3), (-2, 0), (2**31 - 1, 6)])
def test_index_out_of_range_names_value_and_position(bad_value, pos):
    index = np.zeros(7, np.int32)
    index[pos] = bad_value
    for reference in (False, True):
        with pytest.raises(mb.InputError) as e:
            ops.avg_pool_indexed(np.ones((7, 2), np.float32), index, num_out=5, divisor=9.0, reference=reference)
        msg = str(e.value)
        assert msg.startswith("avg_pool_indexed:") and f"index[{pos}] = {bad_value}" in msg, msg


F = np.float32
I = np.int32


@pytest.mark.parametrize("bad,operand", [
    (lambda: ops.avg_pool_indexed(np.ones((4, 2), F), np.zeros(3, I), num_out=1, divisor=9.0), "index"),
    (lambda: ops.avg_pool_indexed(np.ones((4, 2), F), np.zeros(4, np.int64), num_out=1, divisor=9.0), "index"),
    (lambda: ops.avg_pool_indexed(np.ones((4, 2), np.float16), np.zeros(4, I), num_out=1, divisor=9.0), "x"),
    (lambda: ops.avg_pool_indexed(np.ones(4, F), np.zeros(4, I), num_out=1, divisor=9.0), "x"),
    (lambda: ops.avg_pool_indexed(np.ones((4, 2), F), np.zeros(4, I), num_out=1, divisor=0.0), "divisor"),
    (lambda: ops.avg_pool_indexed(np.ones((4, 2), F), np.zeros(4, I), num_out=1, divisor=float("nan")), "divisor"),
    (lambda: ops.avg_pool_indexed(np.ones((4, 2), F), np.zeros(4, I), num_out=-1, divisor=9.0), "num_out"),
    (lambda: ops.avg_pool_indexed(np.ones((4, 2), F), np.zeros(4, I), num_out=2, divisor=9.0,
                                  out=np.zeros((1, 2), F)), "out"),
])
def test_bad_input(bad, operand):
    with pytest.raises(mb.InputError) as e:
        bad()
    msg = str(e.value)
    assert msg.startswith("avg_pool_indexed:") and operand in msg, msg
