"""MoE kernels on metal-sim when the ids come from the device (so the host never checked them): a corrupt
expert id must neither read outside its buffers (the sim's bindings are bounds-checked) nor leave garbage:
linear_gathered and linear_quantized_gathered write a zero row, route_weights gives the weight 0. Fails when metal-sim is not built.
"""

import numpy as np

import markbase as mb
from markbase._core import metal_sim


def setup_module():
    assert mb._core.metal_sim_built(), "metal-sim is not built (clang 22 or newer is needed at build time)"


def test_linear_gathered_zero_row_for_corrupt_id():
    x = np.ones((2, 8), np.float32)
    w = np.ones((3, 4, 8), np.float32)
    out = np.full((2, 4), np.nan, np.float32)
    args = np.array([1, 8, 4, 0, 3], np.uint32).tobytes()  # LinearGatheredArgs{{M, K, N, has_bias}, E}
    metal_sim.run_test_kernel("linear_gathered_f32_f32", [x, w, np.array([1, 7], np.int32), out], [1, 2], [128],
                              args=args, read_only=[0, 1, 2])
    np.testing.assert_array_equal(out, [[8, 8, 8, 8], [0, 0, 0, 0]])


def test_linear_quantized_gathered_zero_row_for_corrupt_id():
    x = np.ones((2, 64), np.float32)
    q = np.full((3, 4, 32), 0x11, np.uint8)  # 4-bit: every value 1
    s = np.full((3, 4, 1), 2.0, np.float32)
    b = np.full((3, 4, 1), 0.5, np.float32)
    out = np.full((2, 4), np.nan, np.float32)
    # QuantGatheredArgs{{M, K, N, has_bias, row_bytes, groups, group_size}, E}
    args = np.array([1, 64, 4, 0, 32, 1, 64, 3], np.uint32).tobytes()
    metal_sim.run_test_kernel("linear_quantized_gathered_q4_f32", [x, q, s, b, np.array([2, 3], np.int32), out],
                              [1, 2], [128], args=args, read_only=[0, 1, 2, 3, 4])
    np.testing.assert_array_equal(out, [[160, 160, 160, 160], [0, 0, 0, 0]])  # 64 · (2 · 1 + 0.5)


def test_route_weights_zero_weight_for_corrupt_id():
    w = np.array([[0.5, 0.25, 0.25]], np.float32)
    ids = np.array([[2, -1, 0]], np.int32)
    scale = np.array([2.0, 3.0, 4.0], np.float32)
    out_w = np.full((1, 3), np.nan, np.float32)
    out_i = np.zeros((1, 3), np.int32)
    args = np.array([1, 3, 3], np.uint32).tobytes()  # RouteWeightsArgs{T, K, E}
    metal_sim.run_test_kernel("route_weights_f32", [w, ids, scale, out_w, out_i], [1], [32], args=args,
                              read_only=[0, 1, 2])
    # Sorted by id: -1 (weight 0), 0 (0.25 · 2), 2 (0.5 · 4).
    np.testing.assert_array_equal(out_i, [[-1, 0, 2]])
    np.testing.assert_array_equal(out_w, [[0.0, 0.5, 2.0]])
