"""Convolution on metal-sim: the Metal kernels (metal/conv.metal) against the CPU scalar reference, with the
thresholds of tests/ops/test_conv.py (conv2d cases use its check, references/conv.py, which also compares the
reference with the numpy formula). The general grid (the model's 3×3 stride 2 padding 1 configurations, odd
sizes, depthwise K ∈ {1, 5}) runs in tests/ops/test_conv.py on every device, metal-sim included; this file
keeps the Metal-specific cases: a tail of the 8-channel tile, every weight × bias dtype pair, a tap chunk
ending inside a kernel row, depthwise with two staged tap chunks (K = 21) or two channel threadgroups
(C = 300)."""

import numpy as np
import pytest

from markbase._core import ops
from parity import FLOAT_DTYPES, device_vs_reference, rng, tensor
from references.conv import check_conv2d, conv_tolerance

from .sim import require_sim

DEVICE = "metal-sim"


# 3×3, stride 2, padding 1, beyond tests/ops/test_conv.py's S2_SHAPES (which run there on every device,
# metal-sim included). (B, Cin, Cout, H, W)
S2_SHAPES = [
    (2, 128, 9, 7, 5),     # Cout not a multiple of the 8-channel tile, odd image
]


@pytest.mark.parametrize("wdtype", FLOAT_DTYPES)
@pytest.mark.parametrize("B,Cin,Cout,H,W", S2_SHAPES)
def test_conv2d_3x3_s2_p1(B, Cin, Cout, H, W, wdtype):
    require_sim()
    check_conv2d(DEVICE, B, Cin, Cout, H, W, (3, 3), (2, 2), (1, 1), wdtype, None, seed=H * 1000 + W + Cin)


@pytest.mark.parametrize("bdtype", FLOAT_DTYPES)
@pytest.mark.parametrize("wdtype", FLOAT_DTYPES)
def test_conv2d_bias_dtypes(wdtype, bdtype):
    # Every weight × bias storage pair (the bias dtype is chosen at run time in the kernel).
    require_sim()
    check_conv2d(DEVICE, 2, 3, 11, 9, 8, (3, 3), (1, 1), (1, 1), wdtype, bdtype, seed=5)


@pytest.mark.parametrize("k,stride,pad", [
    ((2, 5), (1, 3), (0, 2)),   # rectangular kernel, column stride 3, padding wider than the kernel's reach
    ((1, 1), (2, 2), (0, 0)),   # pointwise with subsampling
    ((4, 4), (3, 2), (2, 0)),   # even kernel, padding only on rows
    ((3, 3), (1, 1), (0, 0)),   # valid convolution
    ((9, 11), (2, 1), (4, 5)),  # 7·99 = 693 taps: a tap chunk ends inside a kernel row
])
def test_conv2d_general(k, stride, pad):
    require_sim()
    check_conv2d(DEVICE, 2, 7 if k == (9, 11) else 3, 6, 17, 23, k, stride, pad, "bf16", "f32", seed=sum(k) + sum(stride))


def test_conv2d_nan_reaches_exactly_its_windows():
    require_sim()
    x = np.zeros((1, 1, 5, 5), np.float32)
    x[0, 0, 2, 2] = np.nan
    w = np.ones((1, 1, 3, 3), np.float32)
    y = ops.conv2d(x, w, stride=2, padding=1, device=DEVICE).numpy()[0, 0]
    expect_nan = np.zeros((3, 3), bool)
    expect_nan[1, 1] = True  # only output (1, 1) reads input (2, 2) with stride 2, padding 1
    np.testing.assert_array_equal(np.isnan(y), expect_nan)
    assert (y[~expect_nan] == 0).all()


# K = 21: two staged tap chunks (16 + 5); C = 300: two threadgroups of channels, the second partly idle.
# The K ∈ {1, 5} × C ∈ {1, 31, 1024} cases run in tests/ops/test_conv.py on every device, metal-sim included.
DW_KC = [(21, 1), (21, 31), (21, 300), (21, 1024), (1, 300), (5, 300)]


@pytest.mark.parametrize("wdtype", FLOAT_DTYPES)
@pytest.mark.parametrize("T", [1, 3, 33, 257])
@pytest.mark.parametrize("K,C", DW_KC)
def test_depthwise_conv1d_causal(K, C, T, wdtype):
    # T = 257: a tail of the 8-step time tile.
    require_sim()
    r = rng(K * 10000 + T * 10 + C)
    x = r.normal(size=(T, C)).astype(np.float32)
    w = r.normal(size=(C, 1, K)).astype(np.float32)
    xt, wt = tensor(x, "f32"), tensor(w, wdtype)
    what = f"depthwise_conv1d_causal K{K} T{T} C{C} w:{wdtype}"
    # As tests/ops/test_depthwise_conv1d_causal: plain f32 thresholds for K <= 5; for K = 21 the f32
    # accumulation bound of conv_tolerance(K) (same order of summation in both, so this is slack).
    tol = conv_tolerance(K) if K > 5 else {}
    device_vs_reference(lambda **kw: ops.depthwise_conv1d_causal(xt, wt, **kw), (T, C), "f32", DEVICE, what, **tol)


def test_depthwise_conv1d_is_causal():
    require_sim()
    x = np.ones((20, 3), np.float32)
    x[10, 1] = np.nan
    w = np.ones((3, 1, 5), np.float32)
    y = ops.depthwise_conv1d_causal(x, w, device=DEVICE).numpy()
    np.testing.assert_array_equal(np.where(np.isnan(y[:, 1]))[0], np.arange(10, 15))
    assert not np.isnan(y[:, [0, 2]]).any()
    np.testing.assert_array_equal(y[:, 0], np.minimum(np.arange(20) + 1, 5).astype(np.float32))


def test_bad_input_is_still_an_input_error():
    require_sim()
    import markbase as mb
    with pytest.raises(mb.InputError, match="conv2d: .*w"):
        ops.conv2d(np.ones((1, 2, 5, 5), np.float32), np.ones((3, 4, 3, 3), np.float32), device=DEVICE)
    with pytest.raises(mb.InputError, match="depthwise_conv1d_causal: .*w"):
        ops.depthwise_conv1d_causal(np.ones((4, 3), np.float32), np.ones((4, 1, 5), np.float32), device=DEVICE)
