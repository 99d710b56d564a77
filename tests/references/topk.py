"""Shared by tests/ops/test_topk.py and tests/metal/test_sim_topk.py: selection does no arithmetic, so
indices and value bits must match numpy exactly (values descending, ties keep the lower index first, NaN
ranks above every number, as torch.topk)."""

import numpy as np

from markbase._core import ops
from parity import assert_equal, rng

# NaN, ±Inf, repeated values and both zeros in short rows.
SPECIAL_ROWS = np.array([
    [1.0, np.nan, 3.0, np.inf, np.nan, -np.inf, 3.0, 0.0],
    [-0.0, 0.0, -0.0, np.nan, 2.0, 2.0, -1.0, np.inf],
    [np.nan] * 8,
    [-np.inf] * 8,
], np.float32)


def make(data, R, N, seed):
    """R rows of N: "normal" values, or "ties" (few distinct values: many ties, which keep index order)."""
    r = rng(seed)
    if data == "normal":
        return r.normal(size=(R, N)).astype(np.float32)
    return r.integers(-3, 4, size=(R, N)).astype(np.float32)


def numpy_topk(x, k):
    """Stable argsort of -x (ties: lower index first), with NaNs moved ahead of everything in index order."""
    nan = np.isnan(x)
    key = np.where(nan, 0.0, -x.astype(np.float64))
    cols = np.arange(x.shape[1])
    order = np.stack([np.lexsort((cols, key[r], ~nan[r])) for r in range(x.shape[0])])[:, :k]
    return np.take_along_axis(x, order, axis=1), order.astype(np.int32)


def check(x, k, device, what=""):
    """topk on `device` and the reference kernel against numpy_topk."""
    want_v, want_i = numpy_topk(x, k)
    for name, kw in ((device, {"device": device}), ("reference", {"reference": True})):
        v, i = ops.topk(x, k, **kw)
        assert v.dtype == "f32" and i.dtype == "i32" and v.shape == (x.shape[0], k) == i.shape
        where = " ".join(filter(None, ["topk", what, name])) + f" N={x.shape[1]} k={k}"
        assert_equal(i.numpy(), want_i, what=f"{where} indices")
        # Compare bit patterns so NaN == NaN and -0.0 != +0.0 would both be noticed.
        assert_equal(v.numpy().view(np.uint32), want_v.view(np.uint32), what=f"{where} values")
