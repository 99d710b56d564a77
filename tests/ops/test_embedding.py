"""Parity grid for embedding: out[t] = f32(table[ids[t]]) * scale (see tests/parity.py for the harness).

Both kernels do exactly one f32 multiply and one rounding per element, so fast and reference must agree
bit for bit. Against float64 numpy the only error is that multiply's rounding plus the rounding to the
output dtype, well inside parity.py's per-dtype tolerances.
"""

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from parity import FLOAT_DTYPES, assert_close, assert_equal, rng, round_to, run_guarded, tensor
from references.embedding import V, make_ids

DIMS = [1, 3, 31, 32, 33, 257, 4097]


@pytest.mark.parametrize("scale", [1.0, 39.25])
@pytest.mark.parametrize("out_dtype", ["f32", "bf16"])
@pytest.mark.parametrize("ids_dtype", ["i32", "i64"])
@pytest.mark.parametrize("table_dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("D", DIMS)
def test_embedding_parity(D, table_dtype, ids_dtype, out_dtype, scale, device):
    T = 7
    table = rng(D).normal(0, 1, size=(V, D)).astype(np.float32)
    ids = make_ids(T, ids_dtype, D)
    tt = tensor(table, table_dtype)
    what = f"embedding table={table_dtype} ids={ids_dtype} out={out_dtype} D={D} scale={scale}"
    fast = run_guarded(lambda out: ops.embedding(tt, ids, scale=scale, out=out, device=device), (T, D), out_dtype, what)
    ref = run_guarded(lambda out: ops.embedding(tt, ids, scale=scale, out=out, reference=True), (T, D), out_dtype, what)
    assert_equal(fast.numpy(), ref.numpy(), what=f"{what}: {device} vs reference (bits)")
    want = round_to(table, table_dtype)[ids] * np.float64(np.float32(scale))
    assert_close(ref, want, out_dtype, what=f"{what}: reference vs numpy")


def test_embedding_defaults_and_many_tokens():
    # Enough tokens for the fast kernel to split them over the thread pool.
    table = rng(1).normal(size=(V, 256)).astype(np.float32)
    ids = rng(2).integers(0, V, size=300)
    out = ops.embedding(table, ids)
    assert out.dtype == "f32" and out.shape == (300, 256)
    assert_equal(out.numpy(), table[ids], what="scale 1.0 copies rows exactly")
    bf = ops.embedding(tensor(table, "bf16"), ids, out_dtype="bf16", scale=2.0)
    assert bf.dtype == "bf16"
    assert_equal(bf.numpy(), ops.embedding(tensor(table, "bf16"), ids, out_dtype="bf16", scale=2.0, reference=True).numpy())


def test_embedding_empty_ids():
    # (A Tensor, not np.zeros(0): numpy gives empty arrays stride 0, which Tensor.is_contiguous rejects.)
    out = ops.embedding(np.ones((4, 5), np.float32), mb.Tensor.empty([0], "i64"))
    assert out.shape == (0, 5)


@pytest.mark.parametrize("bad_id,pos", [(-1, 2), (V, 0), (V + 1000, 4), (-(2**40), 1)])
@pytest.mark.parametrize("reference", [False, True])
def test_embedding_id_out_of_range(bad_id, pos, reference):
    ids = np.arange(5, dtype=np.int64)
    ids[pos] = bad_id
    with pytest.raises(mb.InputError, match=rf"^embedding: ids\[{pos}\] = {bad_id} is out of range \[0, {V}\)"):
        ops.embedding(np.ones((V, 4), np.float32), ids, reference=reference)


def _table(*shape, dtype=np.float32):
    return np.ones(shape, dtype)


@pytest.mark.parametrize("operand,call", [
    ("ids", lambda: ops.embedding(_table(V, 4), np.zeros(3, np.float32))),
    ("ids", lambda: ops.embedding(_table(V, 4), np.zeros((3, 1), np.int32))),
    ("table", lambda: ops.embedding(_table(V, 4, dtype=np.int32), np.zeros(3, np.int32))),
    ("table", lambda: ops.embedding(_table(V), np.zeros(3, np.int32))),
    ("table", lambda: ops.embedding(_table(V, 8)[:, ::2], np.zeros(3, np.int32))),
    ("out", lambda: ops.embedding(_table(V, 4), np.zeros(3, np.int32), out=np.zeros((3, 5), np.float32))),
    ("out", lambda: ops.embedding(_table(V, 4), np.zeros(3, np.int32), out=np.zeros((3, 4), np.float16))),
    ("out", lambda: ops.embedding(_table(V, 4), np.zeros(3, np.int32), out_dtype="f16")),
    ("scale", lambda: ops.embedding(_table(V, 4), np.zeros(3, np.int32), scale=float("nan"))),
])
def test_embedding_bad_input(operand, call):
    with pytest.raises(mb.InputError) as e:
        call()
    msg = str(e.value)
    assert msg.startswith(f"embedding: {operand} "), msg


def test_embedding_out_may_not_alias():
    table = np.ones((V, 4), np.float32)
    t = mb.Tensor(table)
    with pytest.raises(mb.InputError, match="embedding: out overlaps input table"):
        ops.embedding(t, np.zeros(3, np.int32), out=t.slice(0, 0, 3))
