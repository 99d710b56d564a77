"""Shared by tests/ops/test_rope.py and tests/metal/test_sim_rope.py."""

import numpy as np

from markbase._core import ops

# Unsorted, repeated, zero, large (up to 131072) and one that is not a power of two near the top.
POSITIONS = np.array([0, 1, 7, 1000, 8191, 131072, 65537, 7, 3], dtype=np.int64)

TABLES = {
    "default": lambda d: ops.rope_inv_freq("default", d, 1e4),
    "proportional": lambda d: ops.rope_inv_freq("proportional", d, 1e6, 0.25),
    "partial": lambda d: ops.rope_inv_freq("default", d, 1e4, 0.5),  # d_rot = d/2 < d: the rest passes through
}


def unrotated_dims(inv, d):
    """Dims the rotation must leave bit-identical: ≥ d_rot, and both members of zero-frequency pairs."""
    n = len(inv)
    zero = np.flatnonzero(inv == 0)
    return np.concatenate([zero, zero + n, np.arange(2 * n, d)]).astype(np.int64)


def vision_positions(pdtype):
    """A 7-column × 5-row patch grid as (x, y), row-major like the image processor, then 3 padding (−1, −1)."""
    ys, xs = np.meshgrid(np.arange(5), np.arange(7), indexing="ij")
    grid = np.stack([xs.ravel(), ys.ravel()], axis=1)
    return np.concatenate([grid, np.full((3, 2), -1)]).astype(pdtype)
