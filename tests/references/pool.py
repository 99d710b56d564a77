"""Shared by tests/ops/test_pool.py and tests/metal/test_sim_pool.py."""

import numpy as np

from markbase._core import ops
from parity import assert_equal, run_guarded


def vision_block_index(grid_h, grid_w, max_patches, k=3):
    """The pooler's output index per patch row, from the spec's formula (§3.1 positions, §3.5 pooling):
    patch n at grid (row y, col x) (row-major over the grid) goes to (x // k) + (Wp // k)·(y // k) with
    Wp = max_x + 1; padding rows (position (−1, −1)) are skipped."""
    ys, xs = np.divmod(np.arange(grid_h * grid_w), grid_w)
    wp = xs.max() + 1
    idx = (xs // k) + (wp // k) * (ys // k)
    return np.concatenate([idx, -np.ones(max_patches - grid_h * grid_w, np.int64)]).astype(np.int32)


def pool_device_vs_reference(device, x, index, num_out, divisor, what):
    """avg_pool_indexed on `device` against the reference kernel, each into a guarded output: both add an
    output's rows in increasing n and divide once, so their bits must match. Returns the reference output."""
    D = x.shape[1]
    fast = run_guarded(lambda out: ops.avg_pool_indexed(x, index, num_out=num_out, divisor=divisor, out=out,
                                                        device=device), (num_out, D), "f32", what)
    ref = run_guarded(lambda out: ops.avg_pool_indexed(x, index, num_out=num_out, divisor=divisor, out=out,
                                                       reference=True), (num_out, D), "f32", what)
    assert_equal(fast.numpy().view(np.uint32), ref.numpy().view(np.uint32), what=f"{what}: {device} vs reference (bits)")
    return ref
