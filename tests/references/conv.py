"""Shared by tests/ops/test_conv.py and tests/metal/test_sim_conv.py: the conv2d numpy reference, the
threshold and the conv2d parity check."""

import math

import numpy as np

from markbase._core import ops
from parity import assert_close, rng, round_to, run_guarded, tensor


def conv2d_np(x, w, bias, stride, pad):
    """torch.nn.functional.conv2d in float64: zero padding, then one strided window sum per tap."""
    (sh, sw), (ph, pw) = stride, pad
    B, Cin, H, W = x.shape
    Cout, _, kh, kw = w.shape
    Ho, Wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    xp = np.zeros((B, Cin, H + 2 * ph, W + 2 * pw))
    xp[:, :, ph:ph + H, pw:pw + W] = x
    out = np.zeros((B, Cout, Ho, Wo))
    for i in range(kh):
        for j in range(kw):
            window = xp[:, :, i:i + sh * (Ho - 1) + 1:sh, j:j + sw * (Wo - 1) + 1:sw]  # [B, Cin, Ho, Wo]
            out += np.einsum("oc,bchw->bohw", w[:, :, i, j], window)
    if bias is not None:
        out += bias[None, :, None, None]
    return out


def conv_tolerance(k):
    """f32 accumulation of K products (same order in the CPU kernels, FMA-contracted in the AVX2 one; any
    order on Metal): the rounding error grows like √K relative to the output scale, so atol = 1e-6·√K
    (still far below one missing or doubled tap, which moves an element by ~1/√K of the scale)."""
    return dict(rtol=1e-5, atol=1e-6 * math.sqrt(k))


def check_conv2d(device, B, Cin, Cout, H, W, k, stride, pad, wdtype, bdtype, seed):
    """conv2d on `device` against the reference kernel, and the reference against conv2d_np, both within
    conv_tolerance; x is f32, w is stored as wdtype, the bias as bdtype (None: no bias)."""
    r = rng(seed)
    kh, kw = k
    x = r.normal(size=(B, Cin, H, W)).astype(np.float32)
    w = (r.normal(size=(Cout, Cin, kh, kw)) / math.sqrt(Cin * kh * kw)).astype(np.float32)
    b = r.normal(size=(Cout,)).astype(np.float32) if bdtype else None
    xt, wt = tensor(x, "f32"), tensor(w, wdtype)
    bt = tensor(b, bdtype) if bdtype else None
    Ho, Wo = (H + 2 * pad[0] - kh) // stride[0] + 1, (W + 2 * pad[1] - kw) // stride[1] + 1
    shape = (B, Cout, Ho, Wo)
    what = f"conv2d B{B} Cin{Cin} Cout{Cout} {H}x{W} k{k} s{stride} p{pad} w:{wdtype} bias:{bdtype}"
    fast = run_guarded(lambda out: ops.conv2d(xt, wt, bt, stride=stride, padding=pad, out=out, device=device),
                       shape, "f32", what)
    ref = run_guarded(lambda out: ops.conv2d(xt, wt, bt, stride=stride, padding=pad, out=out, reference=True),
                      shape, "f32", what)
    tol = conv_tolerance(Cin * kh * kw)
    assert_close(fast, ref, "f32", what=f"{what}: {device} vs reference", **tol)
    want = conv2d_np(x.astype(np.float64), round_to(w, wdtype), round_to(b, bdtype) if bdtype else None, stride, pad)
    assert_close(ref, want, "f32", what=f"{what}: reference vs numpy", **tol)
