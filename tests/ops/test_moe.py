"""MoE routing ops (ops/moe.h) against numpy emulations in f32 that perform the same IEEE operations in
the same order as the kernels (documented in ops/moe.h), so every backend must match them bit for bit.
"""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import assert_equal, rng

F32 = np.float32


def numpy_route_weights(w, ids, scale):
    """Row sum in j order, then w / sum * scale[id], every step rounded to f32; rows ordered by id."""
    out = np.empty_like(w)
    for t in range(w.shape[0]):
        s = F32(0)
        for j in range(w.shape[1]):
            s = F32(s + w[t, j])
        for j in range(w.shape[1]):
            out[t, j] = F32(F32(w[t, j] / s) * scale[ids[t, j]])
    order = np.argsort(ids, axis=1, kind="stable")
    return np.take_along_axis(out, order, axis=1), np.take_along_axis(ids, order, axis=1)


def numpy_index_add(out, index, src, weight):
    out = out.copy()
    for i, r in enumerate(index):
        add = src[i] if weight is None else (src[i] * weight[i]).astype(F32)  # product rounded first
        out[r] = (out[r] + add).astype(F32)
    return out


def run_all(fn, device):
    """fn(kw) for the fast kernel on `device` and the CPU reference kernel."""
    return {"fast": fn({"device": device}), "reference": fn({"reference": True})}


@pytest.mark.parametrize("T,K,E", [(1, 1, 1), (1, 8, 128), (7, 2, 8), (300, 8, 128)])
def test_route_weights_parity(T, K, E, device):
    r = rng(T * 1000 + K)
    probs = r.dirichlet(np.ones(E), size=T).astype(F32)
    order = np.argsort(-probs, axis=1, kind="stable")[:, :K]
    w = np.take_along_axis(probs, order, axis=1).astype(F32)
    ids = order.astype(np.int32)
    scale = r.uniform(0.5, 2.0, size=E).astype(F32)
    want_w, want_i = numpy_route_weights(w, ids, scale)
    assert K == 1 or not np.array_equal(want_i, ids), "the test should need the sort"
    for what, (got_w, got_i) in run_all(lambda kw: ops.route_weights(w, ids, scale, **kw), device).items():
        assert_equal(got_i.numpy(), want_i, what=f"route_weights {what} ids T={T} K={K}")
        assert_equal(got_w.numpy().view(np.uint32), want_w.view(np.uint32), what=f"route_weights {what} T={T} K={K}")
    # In place (out_w = w, out_ids = ids), as the decoder calls it.
    w2, i2 = w.copy(), ids.copy()
    ops.route_weights(w2, i2, scale, out_w=w2, out_ids=i2, device=device)
    assert_equal(i2, want_i, what="route_weights in place ids")
    assert_equal(w2.view(np.uint32), want_w.view(np.uint32), what="route_weights in place")


@pytest.mark.parametrize("R,D,n", [(1, 1, 1), (5, 33, 3), (16, 300, 40), (64, 2816, 8)])
@pytest.mark.parametrize("weighted", [True, False])
def test_index_add_parity(R, D, n, weighted, device):
    r = rng(R + D + n)
    base = r.normal(size=(R, D)).astype(F32)
    index = r.integers(0, R, size=n).astype(np.int32)  # repeats: rows named twice accumulate in order
    src = r.normal(size=(n, D)).astype(F32)
    weight = r.uniform(-2, 2, size=n).astype(F32) if weighted else None
    want = numpy_index_add(base, index, src, weight)

    def call(kw):
        out = base.copy()
        got = ops.index_add(out, index, src, weight, **kw)
        assert got.numpy().ctypes.data == out.ctypes.data  # in place on the caller's array
        return out

    for what, got in run_all(call, device).items():
        assert_equal(got.view(np.uint32), want.view(np.uint32), what=f"index_add {what} R={R} D={D} n={n}")


def test_index_add_empty_and_untouched_rows(device):
    out = np.arange(12, dtype=F32).reshape(4, 3)
    ops.index_add(out, np.zeros(0, np.int32), np.zeros((0, 3), F32), device=device)
    assert_equal(out, np.arange(12, dtype=F32).reshape(4, 3), what="index_add of no rows")
    ops.index_add(out, np.array([2], np.int32), np.ones((1, 3), F32), np.array([0.5], F32), device=device)
    want = np.arange(12, dtype=F32).reshape(4, 3)
    want[2] += 0.5
    assert_equal(out, want, what="only row 2 changes")


@pytest.mark.parametrize("operand,call", [
    ("index", lambda: ops.index_add(np.zeros((4, 3), F32), np.array([0, 4], np.int32), np.ones((2, 3), F32))),
    ("index", lambda: ops.index_add(np.zeros((4, 3), F32), np.array([-1], np.int32), np.ones((1, 3), F32))),
    ("index", lambda: ops.index_add(np.zeros((4, 3), F32), np.array([0], np.int64), np.ones((1, 3), F32))),
    ("src", lambda: ops.index_add(np.zeros((4, 3), F32), np.array([0, 1], np.int32), np.ones((1, 3), F32))),
    ("src", lambda: ops.index_add(np.zeros((4, 3), F32), np.array([0], np.int32), np.ones((1, 2), F32))),
    ("weight", lambda: ops.index_add(np.zeros((4, 3), F32), np.array([0], np.int32), np.ones((1, 3), F32),
                                     np.ones(2, F32))),
    ("out", lambda: ops.index_add(np.zeros((4, 3), np.float16), np.array([0], np.int32), np.ones((1, 3), F32))),
    ("ids", lambda: ops.route_weights(np.ones((2, 2), F32), np.array([[0, 1], [2, 3]], np.int32), np.ones(3, F32))),
    ("ids", lambda: ops.route_weights(np.ones((2, 2), F32), np.zeros((2, 3), np.int32), np.ones(3, F32))),
    ("w", lambda: ops.route_weights(np.ones((2, 2), np.float16), np.zeros((2, 2), np.int32), np.ones(3, F32))),
    ("scale", lambda: ops.route_weights(np.ones((2, 2), F32), np.zeros((2, 2), np.int32), np.ones((3, 1), F32))),
])
def test_moe_ops_bad_input(operand, call):
    with pytest.raises(mb.InputError) as e:
        call()
    msg = str(e.value)
    assert msg.startswith(("index_add: ", "route_weights: ")) and (
        f" {operand} " in msg or f"'{operand}'" in msg or f"{operand}[" in msg), msg
