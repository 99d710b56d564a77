"""Gathers from tables that lie in a mapped checkpoint file (the PLE table; core/file_map.h).

The CPU kernels read such rows with pread() instead of through the mapping: a byte read through a file
mapping maps the whole page-cache folio holding it (up to 2 MiB on kernels with large folios), so a table
gathered one row per token would grow the resident set by a folio per distinct token. The rows must be
the same either way, and the mapping must stay unmapped (no resident pages gained by a gather).
"""

import sys

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops
from markbase.io import SafetensorsFile
from parity import assert_equal, rng, tensor
from safetensors_testutil import save_with_package


def mapped(tmp_path, arrays):
    """{name: (array, file dtype)} written to a safetensors file, opened mapped."""
    return SafetensorsFile(save_with_package(tmp_path / "t.safetensors", arrays))


@pytest.mark.parametrize("table_dtype", ["f32", "bf16"])
def test_mapped_table_rows_equal_in_memory_rows(tmp_path, table_dtype, device):
    V, D = 300, 777
    table = tensor(rng(3).normal(size=(V, D)).astype(np.float32), table_dtype)
    bits = table.numpy() if table_dtype == "f32" else table.numpy().view(np.uint16)  # bf16 as its raw bits
    f = mapped(tmp_path, {"t": (bits, "BF16" if table_dtype == "bf16" else None)})
    ids = np.array([V - 1, 0, 5, 5, 123, 299, 1] * 40, np.int64)  # first and last rows; enough for the pool
    got = ops.embedding(f.tensor("t"), ids, scale=3.5, device=device).numpy()
    want = ops.embedding(table, ids, scale=3.5, reference=True).numpy()
    assert_equal(got, want, what=f"mapped {table_dtype} table on {device} vs the in-memory reference")


@pytest.mark.parametrize("bits", [4, 8])
def test_mapped_quantized_table_rows_equal_in_memory_rows(tmp_path, bits, device):
    table = rng(bits).normal(size=(90, 320)).astype(np.float32)
    q, s, b = ops.quantize(table, bits=bits, group_size=64, scale_dtype="bf16")
    f = mapped(tmp_path, {"q": (q.numpy(), None), "s": (s.numpy().view(np.uint16), "BF16"),
                          "b": (b.numpy().view(np.uint16), "BF16")})
    ids = np.array([89, 0, 44, 44, 7] * 30, np.int32)
    got = ops.embedding_quantized(f.tensor("q"), f.tensor("s"), f.tensor("b"), bits=bits, group_size=64, ids=ids,
                                  scale=1.5, device=device).numpy()
    want = ops.embedding_quantized(q, s, b, bits=bits, group_size=64, ids=ids, scale=1.5).numpy()
    assert_equal(got, want, what=f"mapped {bits}-bit table on {device} vs in memory")


def mapping_rss_kb(f):
    """Resident kB of f's mapping, from /proc/self/smaps."""
    start, size = f._impl._mapping_range()
    with open("/proc/self/smaps") as smaps:
        lines = smaps.read().splitlines()
    for i, line in enumerate(lines):
        lo, _, rest = line.partition("-")
        if rest and int(lo, 16) == start:
            return next(int(l.split()[1]) for l in lines[i + 1:] if l.startswith("Rss:"))
    raise AssertionError(f"mapping at {start:#x} not in /proc/self/smaps")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
@pytest.mark.parametrize("quantized", [False, True])
def test_gather_leaves_mapped_table_unmapped(tmp_path, quantized):
    # 24 / 12 MiB tables, 24 / 40 rows gathered 1 MiB / 256 KiB apart: through the mapping that is ≥ 96 KiB
    # resident on any kernel (a 4 KiB page per row at least, 2 MiB folios where the page cache has them);
    # through pread, 0.
    V, D = 768, 16384
    values = rng(5).normal(size=(V, D)).astype(np.float32)
    if quantized:
        q, s, b = ops.quantize(values, bits=8, group_size=64, scale_dtype="f32")
        f = mapped(tmp_path, {"q": (q.numpy(), None), "s": (s.numpy(), None), "b": (b.numpy(), None)})
    else:
        f = mapped(tmp_path, {"t": (tensor(values, "bf16").numpy().view(np.uint16), "BF16")})
    ids = np.arange(0, V, 16 if quantized else 32, dtype=np.int32)[:40]
    before = mapping_rss_kb(f)
    if quantized:
        out = ops.embedding_quantized(f.tensor("q"), f.tensor("s"), f.tensor("b"), bits=8, group_size=64, ids=ids)
    else:
        out = ops.embedding(f.tensor("t"), ids)
    assert np.isfinite(out.numpy()).all() and out.shape == (len(ids), D)
    gained = mapping_rss_kb(f) - before
    assert gained == 0, f"gathering {len(ids)} rows mapped {gained} kB of the table"
