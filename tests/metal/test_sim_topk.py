"""topk parity on metal-sim: the Metal kernel (metal/topk.metal) and the CPU reference against numpy
(references/topk.py). Selection does no arithmetic, so indices and value bits must match exactly.

The kernel works in batches of 1024 elements (radix select of a threshold, ordered collection, bitonic
sort in threadgroup memory): the grid covers rows shorter than a batch (no radix pass), longer rows with
k inside one batch, and k spanning several batches with ties across the batch boundaries.
"""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import assert_equal, rng
from references.topk import check, make

from .sim import require_sim, run

DEVICE = "metal-sim"

# (N, k) for N in {1, 3, 33, 128, 257, 1024, 1025, 3000} and k in {1, 8, N} with k <= N.
NK = sorted({(N, k) for N in [1, 3, 33, 128, 257, 1024, 1025, 3000] for k in (1, 8, N) if k <= N})


@pytest.mark.parametrize("N,k", NK)
@pytest.mark.parametrize("data", ["normal", "ties"])
def test_topk_parity(data, N, k):
    require_sim()
    check(make(data, 3, N, N), k, DEVICE, data)


@pytest.mark.parametrize("k", [1023, 1024, 1025, 2049, 2500])
def test_topk_several_batches(k):
    # k > 1024: several batches; ties (7 distinct values) straddle every batch boundary.
    require_sim()
    check(make("ties", 2, 2600, k), k, DEVICE, "ties")
    check(make("normal", 1, 2600, k), k, DEVICE, "normal")


def test_topk_nan_inf_and_signed_zero_long_rows():
    # NaN / Inf / ±0 in rows longer than a batch (radix select over those keys). The short SPECIAL_ROWS
    # cases run in tests/ops/test_topk.py on every device, metal-sim included.
    require_sim()
    r = rng(9)
    long = r.normal(size=(2, 1500)).astype(np.float32)
    pos = r.choice(1500, size=60, replace=False)
    long[0, pos[:20]] = np.nan
    long[0, pos[20:30]] = np.inf
    long[0, pos[30:40]] = -np.inf
    long[1] = -np.abs(long[1])  # all <= 0: the zeros (both signs) are the largest values, tied
    long[1, pos[:30]] = -0.0
    long[1, pos[30:]] = 0.0
    for k in (8, 30, 70):
        check(long, k, DEVICE, "special long")


def test_topk_long_rows_and_many_rows():
    # A vocabulary-sized row (sampling) and many short rows (MoE routing: 128 experts, top-8).
    require_sim()
    r = rng(3)
    check(r.normal(size=(1, 40000)).astype(np.float32), 64, DEVICE, "vocab")
    check(r.normal(size=(1, 40000)).astype(np.float32), 100, DEVICE, "vocab")
    check(r.normal(size=(300, 128)).astype(np.float32), 8, DEVICE, "routing")


@pytest.mark.parametrize("N,k", [(33, 8), (1500, 20), (1500, 1200)])
def test_topk_writes_every_output_and_nothing_else(N, k):
    # Direct dispatch into outputs pre-filled with NaN / -1 (an element the kernel forgets stays so and
    # fails); the sim itself rejects any write outside the bound buffers.
    require_sim()
    R = 3
    x = make("ties", R, N, 4)
    values = np.full((R, k), np.nan, np.float32)
    indices = np.full((R, k), -1, np.int32)
    run("topk_select_f32", [x, values, indices], [R], [256],
        args=np.array([R, N, k], np.uint32).tobytes(), read_only=[0])
    rv, ri = ops.topk(x, k, reference=True)
    assert_equal(indices, ri.numpy(), what="direct topk indices")
    assert_equal(values.view(np.uint32), rv.numpy().view(np.uint32), what="direct topk values")


def test_topk_bad_k_is_still_an_input_error():
    require_sim()
    with pytest.raises(mb.InputError, match="topk: "):
        ops.topk(np.ones((2, 5), np.float32), 6, device=DEVICE)
