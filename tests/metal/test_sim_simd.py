"""metal-sim: simdgroup functions (32 lanes), active-lane semantics, simdgroup_matrix, vector types."""

import numpy as np
import pytest

from parity import bf16_bits_to_f32, f32_to_bf16_bits

from .sim import integers, run


def lanes(x):
    return x.reshape(-1, 32).astype(np.float64)


@pytest.mark.parametrize("group", [32, 96, 256])
def test_simd_functions(group):
    groups = 2
    n = group * groups
    x = integers(n, seed=group)
    y = np.full((12, n), np.nan, np.float32)
    run("test_simd_functions", [x, y], [groups], [group], read_only=[0])
    v = lanes(x)
    lane = np.arange(32)
    want = {
        "simd_sum": np.repeat(v.sum(1, keepdims=True), 32, 1),
        "simd_max": np.repeat(v.max(1, keepdims=True), 32, 1),
        "simd_min": np.repeat(v.min(1, keepdims=True), 32, 1),
        "simd_shuffle": v[:, (lane * 7 + 3) % 32],
        "simd_shuffle_down": np.where(lane + 3 < 32, v[:, np.minimum(lane + 3, 31)], v),
        "simd_shuffle_up": np.where(lane >= 5, v[:, np.maximum(lane - 5, 0)], v),
        "simd_shuffle_xor": v[:, lane ^ 6],
        "simd_broadcast": np.repeat(v[:, 9:10], 32, 1),
        "simd_prefix_inclusive_sum": np.cumsum(v, 1),
        "simd_prefix_exclusive_sum": np.cumsum(v, 1) - v,
        "simd_sum(float2).y": np.repeat(2 * v.sum(1, keepdims=True), 32, 1),
        "simd_sum(uint lane)": np.full(v.shape, 496.0),
    }
    for row, (what, w) in enumerate(want.items()):
        np.testing.assert_array_equal(y[row], w.ravel(), err_msg=what)


@pytest.mark.parametrize("group", [48, 64, 20])
def test_simd_active_lanes_only(group):
    # Threads with x < 0 return before the simd_* calls: the others reduce over the remaining (active)
    # lanes only. group 48 / 20 also leave the last simdgroup partially filled.
    groups = 3
    n = group * groups
    x = integers(n, -20, 50, seed=group)
    sentinel = -12345.0
    y = np.full((3, n), sentinel, np.float32)
    run("test_simd_active_lanes", [x, y], [groups], [group], read_only=[0])
    want = np.full((3, n), sentinel)
    for g in range(groups):
        for s0 in range(0, group, 32):
            idx = np.arange(g * group + s0, g * group + min(group, s0 + 32))
            act = idx[x[idx] >= 0]
            vals = x[act].astype(np.float64)
            want[0, act] = vals.sum()
            want[1, act] = np.cumsum(vals)
            want[2, act] = np.cumsum(vals) - vals
    np.testing.assert_array_equal(y, want)


def test_simdgroup_matrix_multiply_accumulate():
    m, n, k = 16, 24, 32
    r = np.random.default_rng(4)
    a = r.normal(size=(m, k)).astype(np.float32)
    b = r.normal(size=(k, n)).astype(np.float32)
    c = r.normal(size=(m, n)).astype(np.float32)
    d = np.full((m, n), np.nan, np.float32)
    bt = np.ascontiguousarray(b.T)
    args = np.array([m, n, k], np.uint32).tobytes()
    run("test_simdgroup_mma", [a, bt, c, d], [n // 8, m // 8], [32], args=args, read_only=[0, 1, 2])
    want = a.astype(np.float64) @ b.astype(np.float64) + c
    # f32 sums of 32 products of N(0, 1) values: a few ulp of sqrt(32)-sized partial sums.
    np.testing.assert_allclose(d, want, rtol=1e-5, atol=2e-5)


def test_vector_types_and_math():
    x = np.array([1.5, -2.25, 0.3, -4.0], np.float32)
    y = np.full((8, 4), np.nan, np.float32)
    run("test_vector_types", [x, y], [1], [32], read_only=[0])
    f = x.astype(np.float64)
    np.testing.assert_array_equal(y[0], [x[0], x[1], x[3], 1.0])            # float4(v.xy, v.w, 1)
    np.testing.assert_array_equal(y[1], x[::-1])                            # v.wzyx
    np.testing.assert_array_equal(y[2], x.astype(np.float16).astype(np.float32))  # float4(half4(v))
    np.testing.assert_array_equal(y[3], np.full(4, 2.5))                     # float4(2.5) splat
    np.testing.assert_array_equal(y[4], np.abs(x))                          # select(v, -v, v < 0)
    assert y[5, 0] == -x[0]                                                 # as_type sign flip
    np.testing.assert_allclose(y[5, 1:], [np.dot(f, f), np.tanh(f[1]), np.exp(f[2])], rtol=2e-7)
    np.testing.assert_array_equal(y[6], bf16_bits_to_f32(f32_to_bf16_bits(x)))  # float4(bfloat4(v)): nearest even
    np.testing.assert_array_equal(y[7, :3], [x[0], 7.0, 8.0])
    assert y[7, 3] == np.float32(np.float64(x[0]) * x[1] + x[2])           # fma: one rounding
