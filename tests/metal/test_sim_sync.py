"""metal-sim: barriers, threadgroup memory (shared within a group, private to it) and atomics."""

import numpy as np
import pytest

from .sim import integers, require_sim, run, pack_args


def test_kernels_registered():
    names = set(require_sim().kernels())
    assert {"test_barrier_rotate", "test_simd_functions", "gelu_tanh_contig_bf16", "add_row_f16"} <= names


@pytest.mark.parametrize("group", [1, 32, 64, 96, 1024])
def test_barrier_rotate(group):
    # Thread i writes shared[i], waits, reads shared[(i + 1) % group]: without a real barrier the
    # neighbour's slot still holds the sim's NaN fill (or an older value).
    groups = 3
    x = np.arange(groups * group, dtype=np.float32) + 1
    y = np.full_like(x, -1.0)
    run("test_barrier_rotate", [x, y], [groups], [group], read_only=[0])
    want = np.concatenate([np.roll(x[g * group:(g + 1) * group], -1) for g in range(groups)])
    np.testing.assert_array_equal(y, want)


def test_thread_positions_3d():
    # Every built-in position of every thread of a 3x2x1 grid of 8x4x2 groups (MB_THREAD_POSITION).
    grid, group = (3, 2, 1), (8, 4, 2)
    threads = 8 * 4 * 2
    out = np.full((6 * threads, 18), 0xFFFFFFFF, np.uint32)
    run("test_thread_positions", [out], grid, group)
    rows = []
    for gz in range(grid[2]):
        for gy in range(grid[1]):
            for gx in range(grid[0]):
                for i in range(threads):
                    lx, ly, lz = i % 8, (i // 8) % 4, i // 32
                    rows.append([gx * 8 + lx, gy * 4 + ly, gz * 2 + lz, lx, ly, lz, gx, gy, gz, *group, *grid,
                                 i, i % 32, i // 32])
    np.testing.assert_array_equal(out, np.array(rows, np.uint32))


def test_barrier_tree_sum():
    group, groups = 256, 7
    x = np.random.default_rng(1).normal(size=group * groups).astype(np.float32)
    y = np.full(groups, np.nan, np.float32)
    run("test_barrier_tree_sum", [x, y], [groups], [group], read_only=[0])
    want = x.reshape(groups, group).astype(np.float64).sum(axis=1)
    # 8 levels of pairwise f32 additions of values ~N(0, 1): error well below 1e-4 absolute.
    np.testing.assert_allclose(y, want, rtol=0, atol=1e-4)


def test_threadgroup_memory_is_per_group():
    # Each group counts its threads in a threadgroup atomic and checks that its `owner` array holds only
    # its own id: a group seeing another group's memory (or a thread seeing a private copy) fails.
    group, groups = 128, 64
    out = np.full((groups, 2), 0xFFFFFFFF, np.uint32)
    run("test_threadgroup_isolation", [out], [groups], [group])
    np.testing.assert_array_equal(out[:, 0], np.full(groups, group))
    np.testing.assert_array_equal(out[:, 1], np.zeros(groups))


def test_device_atomics():
    n, m = 5000, 17
    x = np.random.default_rng(2).integers(0, 1000, size=n).astype(np.uint32)
    bins = np.zeros(m, np.uint32)
    total = np.zeros(1, np.float32)
    extrema = np.array([np.iinfo(np.int32).min, np.iinfo(np.int32).max], np.int32)
    run("test_device_atomics", [x, bins, total, extrema], [(n + 255) // 256], [256], args=pack_args(n, m), read_only=[0])
    np.testing.assert_array_equal(bins, np.bincount(x % m, minlength=m))
    assert total[0] == float(x.sum())  # integers below 2^24: exact in f32 in any order
    assert list(extrema) == [int(x.max()), int(x.min())]


def test_parallel_groups_many():
    # Many groups across the thread pool, each with barriers: results must not depend on scheduling.
    group, groups = 64, 200
    x = integers(group * groups, seed=3)
    y = np.zeros_like(x)
    run("test_barrier_rotate", [x, y], [groups], [group], read_only=[0])
    np.testing.assert_array_equal(y, np.roll(x.reshape(groups, group), -1, axis=1).ravel())
