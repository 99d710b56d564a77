"""topk against numpy: values descending, ties keep the lower index first, NaN ranks above every number
(as torch.topk). Selection involves no arithmetic, so results must match exactly.
"""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import rng
from references.topk import SPECIAL_ROWS, check, make

# (N, k) for N in {1, 3, 33, 128, 257} and k in {1, 8, N} with k <= N (k > N is an error, tested below).
NK = sorted({(N, k) for N in [1, 3, 33, 128, 257] for k in (1, 8, N) if k <= N})


@pytest.mark.parametrize("N,k", NK)
@pytest.mark.parametrize("data", ["normal", "ties"])
def test_topk_parity(data, N, k, device):
    check(make(data, 5, N, seed=N), k, device, data)


def test_topk_nan_inf_and_signed_zero(device):
    for k in (1, 2, 3, 5, 8):
        check(SPECIAL_ROWS, k, device, "special")


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
