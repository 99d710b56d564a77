"""topk against numpy: values descending, ties keep the lower index first, NaN ranks above every number
(as torch.topk). Selection involves no arithmetic, so results must match exactly.
"""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import assert_equal, rng

# (N, k) for N in {1, 3, 33, 128, 257} and k in {1, 8, N} with k <= N (k > N is an error, tested below).
NK = sorted({(N, k) for N in [1, 3, 33, 128, 257] for k in (1, 8, N) if k <= N})


def numpy_topk(x, k):
    """Stable argsort of -x (ties: lower index first), with NaNs moved ahead of everything in index order."""
    nan = np.isnan(x)
    key = np.where(nan, 0.0, -x.astype(np.float64))
    cols = np.arange(x.shape[1])
    order = np.stack([np.lexsort((cols, key[r], ~nan[r])) for r in range(x.shape[0])])[:, :k]
    return np.take_along_axis(x, order, axis=1), order.astype(np.int32)


def check(x, k, device):
    want_v, want_i = numpy_topk(x, k)
    for what, kw in (("fast", {"device": device}), ("reference", {"reference": True})):
        v, i = ops.topk(x, k, **kw)
        assert v.dtype == "f32" and i.dtype == "i32" and v.shape == (x.shape[0], k) == i.shape
        assert_equal(i.numpy(), want_i, what=f"topk {what} indices N={x.shape[1]} k={k}")
        # Compare bit patterns so NaN == NaN and -0.0 != +0.0 would both be noticed.
        assert_equal(v.numpy().view(np.uint32), want_v.view(np.uint32), what=f"topk {what} values N={x.shape[1]} k={k}")


@pytest.mark.parametrize("N,k", NK)
@pytest.mark.parametrize("data", ["normal", "ties"])
def test_topk_parity(data, N, k, device):
    r = rng(N)
    if data == "normal":
        x = r.normal(size=(5, N)).astype(np.float32)
    else:  # few distinct values: many ties, which must keep index order
        x = r.integers(-3, 4, size=(5, N)).astype(np.float32)
    check(x, k, device)


def test_topk_nan_inf_and_signed_zero(device):
    x = np.array([
        [1.0, np.nan, 3.0, np.inf, np.nan, -np.inf, 3.0, 0.0],
        [-0.0, 0.0, -0.0, np.nan, 2.0, 2.0, -1.0, np.inf],
        [np.nan] * 8,
        [-np.inf] * 8,
    ], np.float32)
    for k in (1, 2, 3, 5, 8):
        check(x, k, device)


def test_topk_long_rows_and_many_rows(device):
    # A vocabulary-sized row (sampling) and many short rows (MoE routing: 128 experts, top-8).
    r = rng(3)
    check(r.normal(size=(2, 40000)).astype(np.float32), 64, device)
    check(r.normal(size=(2, 40000)).astype(np.float32), 100, device)
    check(r.normal(size=(300, 128)).astype(np.float32), 8, device)


@pytest.mark.parametrize("operand,call", [
    ("k", lambda: ops.topk(np.ones((2, 5), np.float32), 0)),
    ("k", lambda: ops.topk(np.ones((2, 5), np.float32), 6)),
    ("k", lambda: ops.topk(np.ones((2, 5), np.float32), -1)),
    ("k", lambda: ops.topk(np.ones((2, 5), np.float32), 10**15)),
    ("x", lambda: ops.topk(np.ones(5, np.float32), 1)),
    ("x", lambda: ops.topk(np.ones((2, 5), np.float16), 1)),
    ("x", lambda: ops.topk(np.ones((2, 5), np.int32), 1)),
    ("x", lambda: ops.topk(np.ones((2, 10), np.float32)[:, ::2], 1)),
    ("x", lambda: ops.topk(np.ones((2, 5), np.float64), 1)),
])
def test_topk_bad_input(operand, call):
    with pytest.raises(mb.InputError) as e:
        call()
    msg = str(e.value)
    assert msg.startswith("topk: ") and (f" {operand} " in msg or f"'{operand}'" in msg), msg
