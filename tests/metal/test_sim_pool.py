"""avg_pool_indexed on metal-sim: the Metal-specific cases of the two-pass kernels (metal/pool.metal: an index
list one past a 1024-entry chunk, edge index lists across chunks, NaN, input errors) against the CPU scalar
reference. The vision-pooler grid and the other random index lists run in tests/ops/test_pool.py on every
device, metal-sim included. As in tests/ops/test_pool.py the threshold is identical bits: both add an output's rows
in increasing n from 0 and divide once."""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import rng
from references.pool import pool_device_vs_reference

from .sim import require_sim

DEVICE = "metal-sim"


def check_pool(x, index, num_out, divisor, what):
    require_sim()
    pool_device_vs_reference(DEVICE, x, index, num_out, divisor, what)


@pytest.mark.parametrize("D", [1, 31, 1152])
def test_random_indices_past_one_chunk(D):
    # N = 1025: one entry past a 1024-entry index chunk. N ∈ {1, 9, 33, 2520} run in tests/ops/test_pool.py.
    N = 1025
    r = rng(N * 7 + D)
    num_out = max(N // 4, 1) + 2  # some outputs get no member
    index = r.integers(-1, num_out, size=N).astype(np.int32)
    x = r.normal(size=(N, D)).astype(np.float32)
    check_pool(x, index, num_out, 2.5, f"random N{N} D{D}")


@pytest.mark.parametrize("case", ["one bucket", "all skipped", "descending", "no rows", "negative divisor"])
def test_edge_index_lists(case):
    r = rng(3)
    N, D, M = {"no rows": (0, 5, 3)}.get(case, (2100, 7, 5))
    index = {
        "one bucket": np.full(N, 2, np.int32),                         # 2100 members of one output, across chunks
        "all skipped": np.full(N, -1, np.int32),                       # every output 0
        "descending": (np.arange(N)[::-1] % M).astype(np.int32),       # buckets interleaved, reversed
        "no rows": np.zeros(0, np.int32),
        "negative divisor": r.integers(-1, M, size=N).astype(np.int32),
    }[case]
    x = r.normal(size=(N, D)).astype(np.float32)
    # Large magnitudes make the summation order visible in the low bits.
    x *= np.exp2(r.integers(-20, 20, size=(N, 1))).astype(np.float32)
    check_pool(x, index, M, -3.0 if case == "negative divisor" else 9.0, f"{case} N{N} D{D} M{M}")


def test_nan_propagates_to_its_output_only():
    require_sim()
    x = np.ones((6, 4), np.float32)
    x[2, 1] = np.nan
    index = np.array([0, 0, 1, 1, -1, 2], np.int32)
    y = ops.avg_pool_indexed(x, index, num_out=3, divisor=2.0, device=DEVICE).numpy()
    expect_nan = np.zeros((3, 4), bool)
    expect_nan[1, 1] = True
    np.testing.assert_array_equal(np.isnan(y), expect_nan)
    np.testing.assert_array_equal(y[0], np.ones(4, np.float32))
    np.testing.assert_array_equal(y[2], np.full(4, 0.5, np.float32))


def test_out_of_range_index_is_still_an_input_error():
    require_sim()
    index = np.zeros(7, np.int32)
    index[3] = 5
    with pytest.raises(mb.InputError, match=r"avg_pool_indexed: index\[3\] = 5"):
        ops.avg_pool_indexed(np.ones((7, 2), np.float32), index, num_out=5, divisor=9.0, device=DEVICE)
