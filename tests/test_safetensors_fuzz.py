"""Property tests: hostile safetensors files either open (and then every tensor view lies inside the
mapping and holds exactly the file's bytes) or raise markbase.CheckpointError. Any other exception,
a crash (the test process dies) or a hang (deadline) fails.

Budget: each test sets max_examples and deadline explicitly; the whole file runs in well under 20 s.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
import struct
import tempfile
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import markbase as mb
from markbase.io import SafetensorsFile
from safetensors_testutil import ITEMSIZE, save_with_package

DTYPES = list(ITEMSIZE)
FUZZ = settings(
    max_examples=200,
    deadline=timedelta(seconds=2),  # generous for a loaded 2-core machine; a hang still fails
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_dir = Path(tempfile.mkdtemp(prefix="mb-st-fuzz-"))
_counter = itertools.count()


@pytest.fixture(scope="module", autouse=True)
def _cleanup():
    yield
    shutil.rmtree(_dir, ignore_errors=True)


def check_file(content: bytes) -> SafetensorsFile | None:
    """Opens `content` as a file; returns None when it is rejected with CheckpointError, else checks
    every tensor view against the raw bytes and the mapping bounds."""
    # A fresh name per example: an earlier mapping of a rewritten file could otherwise see it shrink.
    path = _dir / f"{next(_counter)}.safetensors"
    path.write_bytes(content)
    try:
        f = SafetensorsFile(path)
    except mb.CheckpointError as e:
        assert str(path) in str(e)
        return None
    finally:
        path.unlink()
    base, size = f._impl._mapping_range()
    assert size == len(content)
    start = f._impl.data_start
    (n,) = struct.unpack("<Q", content[:8])
    assert start == 8 + n
    spans = []
    for name in f.keys():
        begin, end = f.offsets(name)
        arr = f[name]
        addr = arr.__array_interface__["data"][0]
        assert addr == base + start + begin
        assert base + start <= addr and addr + arr.nbytes <= base + size
        assert arr.nbytes == end - begin == ITEMSIZE[f.dtype(name)] * math.prod(f.shape(name))
        # Reads every byte of the view; they must be the file's bytes at those offsets.
        assert arr.tobytes() == content[start + begin:start + end]
        try:
            t = f.tensor(name)
        except mb.CheckpointError:
            pass  # dtype markbase cannot compute with, or unaligned data
        else:
            assert t.data_ptr() == addr and t.nbytes == arr.nbytes and not t.writable
        spans.append((begin, end))
    # Independent check of the layout rule: sorted by offset the tensors tile the data section.
    cursor = 0
    for begin, end in sorted(spans):
        assert begin == cursor
        cursor = end
    assert cursor == size - start
    assert isinstance(f.metadata, dict) and all(isinstance(v, str) for v in f.metadata.values())
    return f


def frame(header: bytes, data: bytes) -> bytes:
    return struct.pack("<Q", len(header)) + header + data


# ---------------------------------------------------------------- strategies

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
json_values = st.recursive(json_scalars, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4),
                           max_leaves=12)
dims = st.one_of(st.integers(0, 5), st.integers(-3, 2**66), st.sampled_from([2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64]))


@st.composite
def structured_files(draw) -> bytes:
    """A consistent layout (sometimes valid), then a few hostile perturbations of fields and sizes."""
    header: dict = {}
    if draw(st.booleans()):
        header["__metadata__"] = draw(st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3))
    names = draw(st.lists(st.text(min_size=1, max_size=6).filter(lambda s: s != "__metadata__"), max_size=5, unique=True))
    layout = []
    for name in names:
        dt = draw(st.sampled_from(DTYPES))
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        layout.append((name, dt, shape, ITEMSIZE[dt] * math.prod(shape)))
    # Written in a random order; offsets follow that order.
    layout = draw(st.permutations(layout))
    off = 0
    for name, dt, shape, nbytes in layout:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + nbytes]}
        off += nbytes
    data_len = off
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["dim", "offset", "field", "drop", "extra", "dtype", "data", "metadata", "entry"]))
        if not names and kind not in ("data", "metadata"):
            continue
        e = header[draw(st.sampled_from(names))] if names else None
        if kind not in ("data", "metadata", "entry") and not isinstance(e, dict):
            continue  # this entry was already replaced by a non-object
        if kind == "dim":
            e["shape"] = draw(st.lists(dims, max_size=4))
        elif kind == "offset":
            e["data_offsets"] = [draw(dims), draw(dims)] if draw(st.booleans()) else draw(json_values)
        elif kind == "field":
            e[draw(st.sampled_from(["dtype", "shape", "data_offsets"]))] = draw(json_values)
        elif kind == "drop":
            e.pop(draw(st.sampled_from(["dtype", "shape", "data_offsets"])), None)
        elif kind == "extra":
            e[draw(st.text(max_size=6))] = draw(json_values)
        elif kind == "dtype":
            e["dtype"] = draw(st.sampled_from(DTYPES + ["F128", "U16", "f32", "", "BF16 ", "F8_E4M3FN"]))
        elif kind == "data":
            data_len = max(0, data_len + draw(st.integers(-9, 9)))
        elif kind == "metadata":
            header["__metadata__"] = draw(json_values)
        else:
            header[draw(st.sampled_from(names))] = draw(json_values)
    text = json.dumps(header, ensure_ascii=draw(st.booleans())).encode("utf-8")
    text += b" " * draw(st.integers(0, 9))
    data = draw(st.binary(min_size=data_len, max_size=data_len)) if data_len <= 256 else bytes(data_len)
    return frame(text, data)


JSON_ALPHABET = list('{}[]":,0123456789-+.eE \t\n\\/u') + ["true", "false", "null", '"dtype"', '"shape"',
                                                           '"data_offsets"', '"F32"', '"__metadata__"', "\\ud83d", "é", "\x01"]


# ---------------------------------------------------------------- properties

@FUZZ
@given(header=st.binary(max_size=200), data=st.binary(max_size=48))
def test_random_header_bytes(header, data):
    check_file(frame(header, data))


@FUZZ
@given(tokens=st.lists(st.sampled_from(JSON_ALPHABET), max_size=60), data=st.binary(max_size=32))
def test_json_ish_headers(tokens, data):
    text = "".join(tokens).encode("utf-8")
    content = frame(text, data)
    check_file(content)
    # Differential check of the strict parser: whatever it accepts, Python's (laxer) json accepts too.
    if text and _parser_accepts(content):
        json.loads(text.decode("utf-8"))


def _parser_accepts(content: bytes) -> bool:
    path = _dir / f"{next(_counter)}.safetensors"
    path.write_bytes(content)
    try:
        SafetensorsFile(path)
    except mb.CheckpointError as e:
        return "invalid header" not in str(e)
    finally:
        path.unlink()
    return True


@FUZZ
@given(value=json_values, data=st.binary(max_size=16))
def test_random_json_values_as_header(value, data):
    check_file(frame(json.dumps(value).encode(), data))


@FUZZ
@given(content=structured_files())
def test_structured_hostile_headers(content):
    check_file(content)


@FUZZ
@given(claimed=st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 300), st.sampled_from([2**63, 100 * 2**20, 100 * 2**20 + 1])),
       body=st.binary(max_size=64))
def test_huge_or_wrong_claimed_lengths(claimed, body):
    check_file(struct.pack("<Q", claimed) + b'{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}' + body)


def _valid_file() -> bytes:
    path = _dir / "valid-source.safetensors"
    save_with_package(path, {
        "w": (np.arange(12, dtype=np.float32).reshape(3, 4), None),
        "b": (np.arange(5, dtype=np.uint16), "BF16"),
        "z": (np.zeros((0, 3), np.int64), None),
        "m": (np.array([True, False, True]), None),
        "q": (np.arange(7, dtype=np.uint8), "F8_E4M3"),
    }, metadata={"format": "pt"})
    content = path.read_bytes()
    assert check_file(content) is not None  # the unmutated file is valid
    return content


VALID = None


@FUZZ
@given(ops=st.lists(st.tuples(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "append"]),
                              st.integers(0, 10**6), st.integers(0, 255), st.integers(1, 16)), min_size=1, max_size=4))
def test_mutations_of_a_valid_file(ops):
    global VALID
    if VALID is None:
        VALID = _valid_file()
    b = bytearray(VALID)
    for op, pos, byte, n in ops:
        pos = pos % (len(b) + 1)
        if op == "flip" and pos < len(b):
            b[pos] ^= 1 << (byte % 8)
        elif op == "set" and pos < len(b):
            b[pos] = byte
        elif op == "insert":
            b[pos:pos] = bytes([byte]) * n
        elif op == "delete":
            del b[pos:pos + n]
        elif op == "truncate":
            del b[pos:]
        else:
            b += bytes([byte]) * n
    check_file(bytes(b))


@FUZZ
@given(meta=st.dictionaries(st.text(max_size=12), st.text(max_size=12), max_size=5),
       names=st.lists(st.text(max_size=8).filter(lambda s: s != "__metadata__"), max_size=4, unique=True),
       ascii_only=st.booleans(), indent=st.sampled_from([None, 0, 2]))
def test_parser_decodes_strings_like_python_json(meta, names, ascii_only, indent):
    # Any string (escapes, \u surrogate pairs, raw UTF-8, control characters) must decode exactly.
    header = {"__metadata__": meta, **{n: {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i, n in enumerate(names)}}
    text = json.dumps(header, ensure_ascii=ascii_only, indent=indent).encode("utf-8")
    f = check_file(frame(text, bytes(range(len(names)))))
    assert f is not None
    assert f.metadata == meta and f.keys() == names
