"""Embedding on metal-sim: the Metal-specific cases (D at the 1024-element threadgroup boundary, many tokens,
NaN / Inf / -0 bits, empty ids, id validation) against the CPU scalar reference. As in
tests/ops/test_embedding.py, both do one f32 multiply and one rounding per element, so they must agree bit for
bit. The general parity grid runs in tests/ops/test_embedding.py on every device, metal-sim included."""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import FLOAT_DTYPES, assert_equal, rng, run_guarded, tensor
from references.embedding import V, make_ids

from .sim import require_sim

DEVICE = "metal-sim"
# One threadgroup's 1024 elements exactly and one past it; the other widths (1 … 4097) run in
# tests/ops/test_embedding.py on every device.
DIMS = [1024, 1025]


@pytest.mark.parametrize("scale", [1.0, 39.25])
@pytest.mark.parametrize("out_dtype", ["f32", "bf16"])
@pytest.mark.parametrize("ids_dtype", ["i32", "i64"])
@pytest.mark.parametrize("table_dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("D", DIMS)
def test_embedding_parity(D, table_dtype, ids_dtype, out_dtype, scale):
    require_sim()
    T = 7
    table = rng(D).normal(0, 1, size=(V, D)).astype(np.float32)
    ids = make_ids(T, ids_dtype, D)
    tt = tensor(table, table_dtype)
    what = f"embedding table={table_dtype} ids={ids_dtype} out={out_dtype} D={D} scale={scale}"
    sim = run_guarded(lambda out: ops.embedding(tt, ids, scale=scale, out=out, device=DEVICE), (T, D), out_dtype, what)
    ref = run_guarded(lambda out: ops.embedding(tt, ids, scale=scale, out=out, reference=True), (T, D), out_dtype, what)
    assert_equal(sim.numpy(), ref.numpy(), what=f"{what}: metal-sim vs reference (bits)")


def test_embedding_many_tokens_and_special_values():
    # Many tokens (one threadgroup row each), and rows holding NaN / Inf / -0 that must pass unchanged.
    require_sim()
    table = rng(1).normal(size=(V, 96)).astype(np.float32)
    table[3, :4] = [np.nan, np.inf, -np.inf, -0.0]
    ids = rng(2).integers(0, V, size=300)
    ids[5] = 3
    for dtype in FLOAT_DTYPES:
        tt = tensor(table, dtype)
        for out_dtype in ("f32", "bf16"):
            sim = ops.embedding(tt, ids, scale=0.5, out_dtype=out_dtype, device=DEVICE)
            ref = ops.embedding(tt, ids, scale=0.5, out_dtype=out_dtype, reference=True)
            # Bits, so NaN == NaN and -0 vs +0 are both checked.
            bits = np.uint32 if out_dtype == "f32" else np.uint16
            assert_equal(sim.numpy().view(bits), ref.numpy().view(bits), what=f"embedding {dtype}->{out_dtype}")


def test_embedding_empty_ids():
    require_sim()
    out = ops.embedding(np.ones((4, 5), np.float32), mb.Tensor.empty([0], "i64"), device=DEVICE)
    assert out.shape == (0, 5)


def test_embedding_ids_still_validated():
    # The front door checks every id before any kernel runs.
    require_sim()
    ids = np.arange(5, dtype=np.int64)
    ids[2] = V
    with pytest.raises(mb.InputError, match=rf"^embedding: ids\[2\] = {V} is out of range"):
        ops.embedding(np.ones((V, 4), np.float32), ids, device=DEVICE)
