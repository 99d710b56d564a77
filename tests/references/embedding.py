"""Shared by tests/ops/test_embedding.py and tests/metal/test_sim_embedding.py."""

import numpy as np

from parity import rng

V = 50  # table rows


def make_ids(T, dtype, seed):
    """T ids of dtype "i32" / "i64" into a V-row table: random, plus both ends of the table and a repeat."""
    ids = rng(seed).integers(0, V, size=T)
    ids[0] = V - 1
    if T > 2:
        ids[1] = 0
        ids[2] = V - 1
    return ids.astype(np.int32 if dtype == "i32" else np.int64)
