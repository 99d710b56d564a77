"""Parity grid for conv2d and depthwise_conv1d_causal (see tests/parity.py for the harness).

Activations and outputs are f32; weights f32 / bf16 / f16. The numpy reference uses the weights rounded
to their storage dtype, so the only error left is f32 accumulation, and every comparison uses f32
thresholds widened for the reduction length K (stated where used).
"""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import FLOAT_DTYPES, assert_close, device_vs_reference, rng, round_to, tensor
from references.conv import check_conv2d


# The model's configuration: 3×3, stride 2, padding 1 (audio subsampling 1→128 and 128→32 channels).
S2_SHAPES = [  # (B, Cin, Cout, H, W)
    (1, 1, 128, 257, 128),  # audio layer 0: T frames × 128 mel bins
    (1, 128, 32, 33, 64),   # audio layer 1 (short clip)
    (2, 128, 32, 31, 32),
    (1, 1, 4, 1, 1),
    (1, 1, 4, 1, 3),
    (2, 3, 5, 3, 1),
    (1, 3, 5, 3, 3),
    (1, 3, 7, 31, 33),
    (2, 3, 9, 32, 31),
    (1, 3, 5, 33, 32),
    (1, 3, 4, 257, 3),
    (1, 3, 4, 1, 257),
    (1, 1, 3, 32, 257),
]


@pytest.mark.parametrize("wdtype", FLOAT_DTYPES)
@pytest.mark.parametrize("B,Cin,Cout,H,W", S2_SHAPES)
def test_conv2d_3x3_s2_p1(B, Cin, Cout, H, W, wdtype, device):
    check_conv2d(device, B, Cin, Cout, H, W, (3, 3), (2, 2), (1, 1), wdtype, None, seed=H * 1000 + W + Cin)


@pytest.mark.parametrize("wdtype", FLOAT_DTYPES)
@pytest.mark.parametrize("B,Cin,Cout,H,W", [(1, 3, 5, 1, 1), (2, 3, 4, 31, 33), (1, 128, 9, 32, 3), (1, 1, 8, 33, 257)])
def test_conv2d_3x3_s1_p1_bias(B, Cin, Cout, H, W, wdtype, device):
    check_conv2d(device, B, Cin, Cout, H, W, (3, 3), (1, 1), (1, 1), wdtype, wdtype, seed=H + W)


@pytest.mark.parametrize("k,stride,pad", [
    ((2, 5), (1, 3), (0, 2)),  # rectangular kernel, column stride 3, padding wider than the kernel's reach
    ((1, 1), (2, 2), (0, 0)),  # pointwise with subsampling
    ((4, 4), (3, 2), (2, 0)),  # even kernel, padding only on rows
    ((3, 3), (1, 1), (0, 0)),  # valid convolution
])
def test_conv2d_general(k, stride, pad, device):
    check_conv2d(device, 2, 3, 6, 17, 23, k, stride, pad, "bf16", "bf16", seed=sum(k) + sum(stride))


def test_conv2d_defaults_and_nan():
    # stride / padding default to 1 / 0 and accept ints; NaN in one input pixel reaches exactly the outputs
    # whose window covers it.
    x = np.zeros((1, 1, 5, 5), np.float32)
    x[0, 0, 2, 2] = np.nan
    w = np.ones((1, 1, 3, 3), np.float32)
    for reference in (False, True):
        y = ops.conv2d(x, w, reference=reference).numpy()
        assert y.shape == (1, 1, 3, 3)
        assert np.isnan(y).all(), "every 3x3 window of a 5x5 input covers the centre"
        y = ops.conv2d(x, w, stride=2, padding=1, reference=reference).numpy()[0, 0]
        expect_nan = np.zeros((3, 3), bool)
        expect_nan[1, 1] = True  # only output (1, 1) reads input (2, 2) with stride 2, padding 1
        np.testing.assert_array_equal(np.isnan(y), expect_nan)
        assert (y[~expect_nan] == 0).all()


def dwconv_np(x, w):
    """out[t, c] = Σ_j w[c, 0, j] · x[t − (K−1) + j, c], zero before t = 0 (float64)."""
    T, C = x.shape
    K = w.shape[2]
    xp = np.concatenate([np.zeros((K - 1, C)), x], axis=0)
    return sum(w[:, 0, j][None, :] * xp[j:j + T] for j in range(K))


@pytest.mark.parametrize("wdtype", FLOAT_DTYPES)
@pytest.mark.parametrize("C", [1, 31, 1024])
@pytest.mark.parametrize("T", [1, 3, 33, 257])
@pytest.mark.parametrize("K", [1, 5])
def test_depthwise_conv1d_causal(K, T, C, wdtype, device):
    r = rng(K * 10000 + T * 10 + C)
    x = r.normal(size=(T, C)).astype(np.float32)
    w = r.normal(size=(C, 1, K)).astype(np.float32)
    xt, wt = tensor(x, "f32"), tensor(w, wdtype)
    what = f"depthwise_conv1d_causal K{K} T{T} C{C} w:{wdtype}"
    # At most 5 products per element: plain f32 thresholds.
    _, ref = device_vs_reference(lambda **kw: ops.depthwise_conv1d_causal(xt, wt, **kw), (T, C), "f32", device, what)
    assert_close(ref, dwconv_np(x.astype(np.float64), round_to(w, wdtype)), "f32", what=f"{what}: reference vs numpy")


def test_depthwise_conv1d_is_causal():
    # A NaN at time 10 may reach only t in [10, 10 + K − 1]: the future never leaks into the past.
    x = np.ones((20, 3), np.float32)
    x[10, 1] = np.nan
    w = np.ones((3, 1, 5), np.float32)
    for reference in (False, True):
        y = ops.depthwise_conv1d_causal(x, w, reference=reference).numpy()
        nan_rows = np.where(np.isnan(y[:, 1]))[0]
        np.testing.assert_array_equal(nan_rows, np.arange(10, 15))
        assert not np.isnan(y[:, [0, 2]]).any()
        np.testing.assert_array_equal(y[:, 0], np.minimum(np.arange(20) + 1, 5).astype(np.float32))


F = np.float32


@pytest.mark.parametrize("bad,operand", [
    (lambda: ops.conv2d(np.ones((1, 2, 5, 5), F), np.ones((3, 4, 3, 3), F)), "w"),          # Cin mismatch
    (lambda: ops.conv2d(np.ones((2, 5, 5), F), np.ones((3, 2, 3, 3), F)), "x"),             # rank
    (lambda: ops.conv2d(np.ones((1, 2, 5, 5), np.int32), np.ones((3, 2, 3, 3), F)), "x"),   # dtype
    (lambda: ops.conv2d(np.ones((1, 2, 5, 5), F), np.ones((3, 2, 3, 3), np.int32)), "w"),
    (lambda: ops.conv2d(np.ones((1, 2, 5, 5), F), np.ones((3, 2, 3, 3), F), np.ones(4, F)), "bias"),
    (lambda: ops.conv2d(np.ones((1, 2, 5, 5), F), np.ones((3, 2, 3, 3), F), stride=0), "stride"),
    (lambda: ops.conv2d(np.ones((1, 2, 5, 5), F), np.ones((3, 2, 3, 3), F), padding=-1), "padding"),
    (lambda: ops.conv2d(np.ones((1, 2, 1, 1), F), np.ones((3, 2, 3, 3), F)), "kernel"),     # too small, no pad
    (lambda: ops.conv2d(np.ones((1, 2, 5, 5), F), np.ones((3, 2, 3, 3), F), out=np.ones((1, 3, 5, 5), F)), "out"),
    (lambda: ops.conv2d(np.ones((1, 2, 5, 5), F)[:, :, :, ::2], np.ones((3, 2, 3, 3), F)), "x"),  # not contiguous
    (lambda: ops.depthwise_conv1d_causal(np.ones((4, 3), F), np.ones((4, 1, 5), F)), "w"),  # C mismatch
    (lambda: ops.depthwise_conv1d_causal(np.ones((4, 3), F), np.ones((3, 2, 5), F)), "w"),  # not depthwise
    (lambda: ops.depthwise_conv1d_causal(np.ones((4, 3), F), np.ones((3, 5), F)), "w"),     # rank
    (lambda: ops.depthwise_conv1d_causal(np.ones((4, 3), np.float16), np.ones((3, 1, 5), F)), "x"),
    (lambda: ops.depthwise_conv1d_causal(np.ones((4, 3), F), np.ones((3, 1, 5), F), out=np.ones((4, 3), np.float16)), "out"),
])
def test_bad_input(bad, operand):
    with pytest.raises(mb.InputError) as e:
        bad()
    msg = str(e.value)
    assert msg.startswith(("conv2d:", "depthwise_conv1d_causal:")), msg
    assert operand in msg, msg


def test_out_may_not_alias_input():
    buf = mb.Tensor(np.ones((2, 3), F))
    with pytest.raises(mb.InputError, match="overlaps"):
        ops.depthwise_conv1d_causal(buf, np.ones((3, 1, 2), F), out=buf)
