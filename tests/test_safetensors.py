"""The strict memory-mapped safetensors reader (markbase.io).

Round trips use files written by the `safetensors` package itself; the rejection tests hand-build
one malformed file each and check that the error is a CheckpointError naming the file (and the
tensor, where there is one).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

import markbase as mb
from markbase.io import Checkpoint, SafetensorsFile, TensorNotFoundError, open_checkpoint
from safetensors_testutil import entry, header_bytes, packed, raw_file, save_with_package, write_file

RNG = np.random.default_rng(1234)


def random_array(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind == "f":
        return np.asarray(RNG.standard_normal(shape) * 100, dtype=dtype)
    info = np.iinfo(dtype)
    return np.asarray(RNG.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True))


def open_fails(path: Path, *fragments: str) -> str:
    """Opening `path` raises CheckpointError whose message names the file and every fragment."""
    with pytest.raises(mb.CheckpointError) as ei:
        SafetensorsFile(path)
    msg = str(ei.value)
    assert str(path) in msg, msg
    for f in fragments:
        assert f in msg, msg
    return msg


def assert_inside_mapping(f: SafetensorsFile, name: str, arr: np.ndarray) -> None:
    base, size = f._impl._mapping_range()
    addr = arr.__array_interface__["data"][0]
    begin, end = f.offsets(name)
    assert addr == base + f._impl.data_start + begin
    assert base <= addr and addr + arr.nbytes <= base + size
    assert arr.nbytes == end - begin


# ---------------------------------------------------------------- round trips with the package's writer

NUMPY_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
    "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}


@pytest.mark.parametrize("file_dtype", list(NUMPY_DTYPES))
@pytest.mark.parametrize("shape", [(), (1,), (3,), (31, 33), (2, 3, 5)])
def test_roundtrip_numpy_dtypes(tmp_path, file_dtype, shape):
    arr = random_array(NUMPY_DTYPES[file_dtype], shape)
    other = random_array(np.uint8, (5,))  # a second tensor so offsets are not all zero
    path = tmp_path / "x.safetensors"
    safetensors.numpy.save_file({"t": arr, "other": other}, str(path))
    f = SafetensorsFile(path)
    assert f.dtype("t") == file_dtype
    assert f.shape("t") == shape
    got = f["t"]
    assert got.dtype == arr.dtype and got.shape == shape
    # Bit-exact: compare the raw bytes (NaN-safe).
    assert got.tobytes() == arr.tobytes()
    assert np.array_equal(f["other"], other)
    assert_inside_mapping(f, "t", got)
    # The package's own reader agrees.
    ref = safetensors.numpy.load_file(str(path))
    assert ref["t"].tobytes() == got.tobytes()


@pytest.mark.parametrize("file_dtype", ["F32", "F16", "I64", "I32", "U8", "BOOL"])
def test_tensor_view_of_computable_dtypes(tmp_path, file_dtype):
    arr = random_array(NUMPY_DTYPES[file_dtype], (4, 7))
    path = save_with_package(tmp_path / "x.safetensors", {"t": (arr, None)})
    t = SafetensorsFile(path).tensor("t")
    assert isinstance(t, mb.Tensor)
    assert t.kind == "mapped" and not t.writable and t.shape == (4, 7)
    assert t.numpy().tobytes() == arr.tobytes()


def test_roundtrip_bf16_bits(tmp_path):
    # Every class of bf16 bit pattern: random, ±0, ±Inf, NaNs, subnormals.
    bits = np.concatenate([
        RNG.integers(0, 1 << 16, size=997, dtype=np.uint16),
        np.array([0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x0001, 0x807F], dtype=np.uint16),
    ]).reshape(5, 201)
    path = save_with_package(tmp_path / "bf.safetensors", {"w": (bits, "BF16"), "b": (bits[0], "BF16")})
    f = SafetensorsFile(path)
    assert f.dtype("w") == "BF16" and f.shape("w") == (5, 201)
    got = f["w"]
    assert got.dtype == np.uint16 and np.array_equal(got, bits)
    t = f.tensor("w")
    assert t.dtype == "bf16" and t.kind == "mapped"
    assert np.array_equal(t.numpy(), bits)
    # bf16 -> f32 is exact: the bits shifted into the top half of a float32.
    want = (bits.astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(t.to_float32().view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("file_dtype", ["F8_E4M3", "F8_E5M2"])
def test_roundtrip_f8_raw_bits_and_no_compute(tmp_path, file_dtype):
    bits = np.arange(256, dtype=np.uint8).reshape(16, 16)
    path = save_with_package(tmp_path / "f8.safetensors", {"q": (bits, file_dtype)})
    f = SafetensorsFile(path)
    assert f.dtype("q") == file_dtype
    assert f["q"].dtype == np.uint8 and np.array_equal(f["q"], bits)
    with pytest.raises(mb.CheckpointError) as ei:
        f.tensor("q")
    msg = str(ei.value)
    assert str(path) in msg and "'q'" in msg and file_dtype in msg and "cannot compute" in msg


@pytest.mark.parametrize("file_dtype", ["F64", "I16", "I8"])
def test_uncomputable_dtypes_raise_on_tensor_but_read_as_numpy(tmp_path, file_dtype):
    arr = random_array(NUMPY_DTYPES[file_dtype], (3, 4))
    path = save_with_package(tmp_path / "x.safetensors", {"t": (arr, None)})
    f = SafetensorsFile(path)
    assert np.array_equal(f["t"], arr)
    with pytest.raises(mb.CheckpointError, match="cannot compute with dtype " + file_dtype) as ei:
        f.tensor("t")
    assert str(path) in str(ei.value) and "'t'" in str(ei.value)


def test_zero_size_tensors(tmp_path):
    tensors = {
        "empty1d": (np.zeros((0,), np.float32), None),
        "empty3d": (np.zeros((3, 0, 2), np.float16), None),
        "real": (np.arange(6, dtype=np.float32), None),
        "emptybf": (np.zeros((0, 4), np.uint16), "BF16"),
    }
    path = save_with_package(tmp_path / "z.safetensors", tensors)
    f = SafetensorsFile(path)
    assert len(f) == 4
    for name, (arr, _) in tensors.items():
        got = f[name]
        assert got.shape == arr.shape
        begin, end = f.offsets(name)
        assert (end - begin) == arr.nbytes
    assert f["empty3d"].size == 0 and f.tensor("empty3d").shape == (3, 0, 2)
    assert np.array_equal(f["real"], np.arange(6, dtype=np.float32))


def test_metadata(tmp_path):
    meta = {"format": "pt", "note": "ünïcödé ✓ \"quoted\" \\ back\nslash", "": "empty key"}
    path = save_with_package(tmp_path / "m.safetensors", {"a": (np.ones(3, np.float32), None)}, metadata=meta)
    f = SafetensorsFile(path)
    assert f.metadata == meta
    assert "__metadata__" not in f and f.keys() == ["a"]
    plain = save_with_package(tmp_path / "n.safetensors", {"a": (np.ones(3, np.float32), None)})
    assert SafetensorsFile(plain).metadata == {}


def test_many_tensors_file_order(tmp_path):
    dtypes = [np.float32, np.float16, np.int64, np.int32, np.uint8, np.bool_, np.float64, np.int8]
    tensors = {}
    for i in range(300):
        shape = tuple(int(s) for s in RNG.integers(0, 6, size=int(RNG.integers(0, 4))))
        tensors[f"layer.{i}.weight"] = random_array(dtypes[i % len(dtypes)], shape)
    path = tmp_path / "many.safetensors"
    safetensors.numpy.save_file(tensors, str(path))
    f = SafetensorsFile(path)
    assert len(f) == len(tensors) and set(f.keys()) == set(tensors) and set(f) == set(tensors)
    # keys() are in file order: data offsets never decrease.
    begins = [f.offsets(k)[0] for k in f.keys()]
    assert begins == sorted(begins)
    for name, arr in tensors.items():
        got = f[name]
        assert got.dtype == arr.dtype and got.shape == arr.shape and got.tobytes() == arr.tobytes()
        assert_inside_mapping(f, name, got)


def test_file_with_no_tensors(tmp_path):
    path = tmp_path / "empty.safetensors"
    safetensors.numpy.save_file({}, str(path))
    f = SafetensorsFile(path)
    assert len(f) == 0 and f.keys() == [] and list(f) == []
    # The minimal hand-written form: N bytes of "{}" and nothing else.
    path2 = tmp_path / "empty2.safetensors"
    path2.write_bytes(raw_file(b"{}"))
    assert len(SafetensorsFile(path2)) == 0


def test_escaped_names_are_decoded(tmp_path):
    # json.dumps escapes non-ASCII (and uses surrogate pairs above the BMP): the parser must decode them.
    names = ["plain", "é-accent", "emoji-😀", "quote\"back\\slash", "tab\tnewline\n", "nul\u0000byte", "/slash"]
    header, data = packed({n: ("U8", [i + 1]) for i, n in enumerate(names)})
    text = json.dumps(header, ensure_ascii=True)
    assert "\\ud83d\\ude00" in text
    path = write_file(tmp_path / "names.safetensors", text, data)
    f = SafetensorsFile(path)
    assert set(f.keys()) == set(names)
    for i, n in enumerate(names):
        assert f.shape(n) == (i + 1,)


def test_whitespace_and_key_order_variants_are_valid(tmp_path):
    # Pretty-printed header, keys in another order, __metadata__ last, unpadded header.
    header, data = packed({"b": ("F32", [2]), "a": ("I64", [1])}, metadata={"k": "v"})
    reordered = {"b": {"shape": [2], "data_offsets": header["b"]["data_offsets"], "dtype": "F32"}, "a": header["a"],
                 "__metadata__": {"k": "v"}}
    path = tmp_path / "ws.safetensors"
    path.write_bytes(raw_file(json.dumps(reordered, indent=2).encode() + b"\n\t\r ", data))
    f = SafetensorsFile(path)
    assert f.keys() == ["b", "a"] and f.metadata == {"k": "v"}
    assert f["a"].tobytes() == data[8:16]


# ---------------------------------------------------------------- zero copy and lifetime

def test_zero_copy_numpy_and_tensor(tmp_path):
    arr = random_array(np.float32, (256, 64))
    path = save_with_package(tmp_path / "zc.safetensors", {"w": (arr, None), "x": (np.ones(8, np.uint8), None)})
    f = SafetensorsFile(path)
    a, b = f["w"], f["w"]
    assert not a.flags.owndata and not a.flags.writeable
    assert_inside_mapping(f, "w", a)
    # Two reads are views of the same mapped bytes, not copies.
    assert a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    t = f.tensor("w")
    assert t.data_ptr() == a.__array_interface__["data"][0]
    assert np.shares_memory(t.numpy(), a)


def test_arrays_are_read_only(tmp_path):
    path = save_with_package(tmp_path / "ro.safetensors", {"w": (np.zeros(4, np.float32), None)})
    a = SafetensorsFile(path)["w"]
    with pytest.raises(ValueError):
        a[0] = 1.0
    with pytest.raises(ValueError):
        a.flags.writeable = True
    assert not SafetensorsFile(path).tensor("w").writable


def test_views_keep_the_mapping_alive(tmp_path):
    arr = random_array(np.float32, (100,))
    path = save_with_package(tmp_path / "live.safetensors", {"w": (arr, None)})
    f = SafetensorsFile(path)
    a = f["w"]
    t = f.tensor("w")
    del f
    gc.collect()
    os.unlink(path)  # the mapping outlives the directory entry too
    gc.collect()
    assert np.array_equal(a, arr)
    assert np.array_equal(t.numpy(), arr)
    ck_dir = tmp_path / "ck"
    ck_dir.mkdir()
    save_with_package(ck_dir / "model.safetensors", {"w": (arr, None)})
    c = open_checkpoint(ck_dir)
    a2 = c["w"]
    del c
    gc.collect()
    assert np.array_equal(a2, arr)


def test_unaligned_data_numpy_ok_tensor_refused(tmp_path):
    # A 3-byte U8 tensor first puts the F32 tensor at an odd offset (the package's writer never does).
    header, data = packed({"pad": ("U8", [3]), "w": ("F32", [2])})
    want = np.array([1.5, -2.25], np.float32)
    data = data[:3] + want.tobytes()
    path = write_file(tmp_path / "ua.safetensors", header, data)
    f = SafetensorsFile(path)
    assert np.array_equal(f["w"], want)
    with pytest.raises(mb.CheckpointError, match="not aligned") as ei:
        f.tensor("w")
    assert str(path) in str(ei.value) and "'w'" in str(ei.value)


# ---------------------------------------------------------------- Python surface

def test_mapping_protocol_and_missing_key(tmp_path):
    path = save_with_package(tmp_path / "p.safetensors", {"a": (np.ones(2, np.float32), None), "b": (np.ones(1, np.int32), None)})
    f = SafetensorsFile(path)
    assert len(f) == 2 and sorted(f) == ["a", "b"] and "a" in f and "zz" not in f and 3 not in f
    for call in (lambda: f["zz"], lambda: f.tensor("zz"), lambda: f.dtype("zz"), lambda: f.shape("zz"), lambda: f[3]):
        with pytest.raises(KeyError) as ei:
            call()
        assert isinstance(ei.value, mb.CheckpointError) and isinstance(ei.value, TensorNotFoundError)
        assert str(path) in str(ei.value)
    with pytest.raises(mb.CheckpointError, match="'zz'"):
        f["zz"]


def test_path_objects_and_bad_paths(tmp_path):
    path = save_with_package(tmp_path / "p.safetensors", {"a": (np.ones(2, np.float32), None)})
    assert SafetensorsFile(path).path == str(path)
    assert SafetensorsFile(str(path)).keys() == ["a"]
    open_fails(tmp_path / "does-not-exist.safetensors", "cannot open")
    open_fails(tmp_path, "not a regular file")


# ---------------------------------------------------------------- malformed files, one case each

def valid_bytes() -> tuple[dict, bytes]:
    return packed({"w": ("F32", [2, 3]), "b": ("BF16", [4])})


def test_reject_file_shorter_than_8_bytes(tmp_path):
    for n in (0, 1, 7):
        p = tmp_path / f"short{n}.safetensors"
        p.write_bytes(b"\x02" * n)
        open_fails(p, "shorter than the 8-byte header length")


def test_reject_header_length_beyond_maximum(tmp_path):
    for n in (100 * 2**20 + 1, 2**63, 2**64 - 1):
        p = tmp_path / f"huge{n}.safetensors"
        p.write_bytes(raw_file(b"{}", header_len=n))
        open_fails(p, f"header length {n} exceeds the maximum")


def test_reject_header_length_beyond_file(tmp_path):
    p = tmp_path / "long.safetensors"
    p.write_bytes(raw_file(b"{}      ", header_len=1000))
    open_fails(p, "header length 1000 exceeds the 8 bytes", "truncated")


def test_reject_empty_header(tmp_path):
    p = tmp_path / "e.safetensors"
    p.write_bytes(raw_file(b""))
    open_fails(p, "header is empty")


def test_reject_truncated_file(tmp_path):
    header, data = valid_bytes()
    p = write_file(tmp_path / "t.safetensors", header, data[:-3])
    open_fails(p, "'b'", "outside the data section", "truncated")


def test_reject_trailing_junk(tmp_path):
    header, data = valid_bytes()
    p = write_file(tmp_path / "j.safetensors", header, data + b"junk")
    open_fails(p, "4 trailing bytes", "'b'")
    p2 = write_file(tmp_path / "j2.safetensors", {}, b"\0" * 8)
    open_fails(p2, "lists no tensors", "8 bytes")


@pytest.mark.parametrize("bad", [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\xf4\x90\x80\x80", b"\x80"])
def test_reject_bad_utf8(tmp_path, bad):
    header, data = packed({"w": ("U8", [1])})
    text = header_bytes(header).replace(b'"w"', b'"w' + bad + b'"')
    p = tmp_path / "u.safetensors"
    p.write_bytes(raw_file(text, data))
    open_fails(p, "invalid UTF-8")


@pytest.mark.parametrize("text", [
    '{"a":}', '{"a":1,}', "[", "{'a':1}", '{"a":01}', "{} x", '{"a":NaN}', "{,}", '{"a" 1}', "nul",
    '{"a":"ctl\x01"}', '{"a":"\\ud800"}', '{"a":"\\udc00"}', '{"a":"\\ud800\\u0041"}', '{"a":"\\x41"}',
    '{"a":"\\u12g4"}', '{"a":1.}', '{"a":-}', '{"a":1e}', '{"a":.5}', '{"a":+1}', "/* c */ {}",
    '{"a":[1,2', '"unterminated', "[" * 100 + "]" * 100, '{"a":tru}', '{} {}', "\x00{}",
])
def test_reject_bad_json(tmp_path, text):
    p = tmp_path / "j.safetensors"
    p.write_bytes(raw_file(text.encode("utf-8")))
    open_fails(p, "invalid header")


@pytest.mark.parametrize("text", ["[]", "1", '"x"', "null", "true"])
def test_reject_header_not_an_object(tmp_path, text):
    p = tmp_path / "o.safetensors"
    p.write_bytes(raw_file(text.encode()))
    open_fails(p, "expected a JSON object")


def bad_entry_file(tmp_path, w_entry, data_len: int = 24) -> Path:
    header = {"ok": entry("U8", [data_len], 0, data_len), "w": w_entry}
    return write_file(tmp_path / "bad.safetensors", header, bytes(data_len))


@pytest.mark.parametrize("w_entry, fragment", [
    ([1, 2], "expected an object"),
    ({"dtype": "F32", "shape": [0]}, "missing field 'data_offsets'"),
    ({"shape": [0], "data_offsets": [24, 24]}, "missing field 'dtype'"),
    ({"dtype": "F32", "data_offsets": [24, 24]}, "missing field 'shape'"),
    ({**entry("F32", [0], 24, 24), "extra": 1}, "unexpected field 'extra'"),
    ({"dtype": 4, "shape": [0], "data_offsets": [24, 24]}, "dtype is a number"),
])
def test_reject_malformed_entry(tmp_path, w_entry, fragment):
    open_fails(bad_entry_file(tmp_path, w_entry), "'w'", fragment)


@pytest.mark.parametrize("dtype", ["F128", "U16", "U64", "f32", "float32", "", "BF16 "])
def test_reject_unknown_dtype(tmp_path, dtype):
    open_fails(bad_entry_file(tmp_path, entry(dtype, [0], 24, 24)), "'w'", "unknown dtype")


def test_reject_negative_shape(tmp_path):
    open_fails(bad_entry_file(tmp_path, entry("U8", [-1], 24, 24)), "'w'", "dimension 0 is negative")
    open_fails(bad_entry_file(tmp_path, entry("U8", [2, -3], 24, 24)), "'w'", "dimension 1 is negative")


@pytest.mark.parametrize("shape", [[1.0], ["2"], [True], [None], [[1]], [1e2], [10**30]])
def test_reject_non_integer_shape(tmp_path, shape):
    open_fails(bad_entry_file(tmp_path, entry("U8", shape, 24, 24)), "'w'", "not a non-negative integer")


def test_reject_shape_not_array_or_too_many_dims(tmp_path):
    open_fails(bad_entry_file(tmp_path, entry("U8", 3, 24, 24)), "'w'", "shape is a number")
    open_fails(bad_entry_file(tmp_path, entry("U8", [1] * 33, 24, 25)), "'w'", "33 dimensions")


def test_reject_shape_product_overflow(tmp_path):
    for shape in ([2**32, 2**32, 2**32], [2**63], [2**62, 2], [2**64 - 1], [0, 2**40, 2**40]):
        open_fails(bad_entry_file(tmp_path, entry("F32", shape, 24, 24)), "'w'", "overflows")


@pytest.mark.parametrize("offsets", [[24], [24, 24, 24], [-1, 24], [24.0, 24], "0-0", None, [24, -1]])
def test_reject_malformed_offsets(tmp_path, offsets):
    w = {"dtype": "U8", "shape": [0], "data_offsets": offsets}
    open_fails(bad_entry_file(tmp_path, w), "'w'", "data_offsets must be an array of two non-negative integers")


def test_reject_begin_after_end(tmp_path):
    open_fails(bad_entry_file(tmp_path, entry("U8", [0], 20, 10)), "'w'", "begin > end")


def test_reject_size_mismatch(tmp_path):
    header = {"w": entry("F32", [2, 2], 0, 12)}
    p = write_file(tmp_path / "s.safetensors", header, bytes(12))
    open_fails(p, "'w'", "needs 16 bytes", "span 12")


def test_reject_overlap(tmp_path):
    header = {"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)}
    p = write_file(tmp_path / "o.safetensors", header, bytes(12))
    open_fails(p, "'a'", "'b'", "overlap")
    # A zero-size tensor placed inside another one also overlaps.
    header = {"a": entry("F32", [2], 0, 8), "z": entry("F32", [0], 4, 4)}
    p2 = write_file(tmp_path / "o2.safetensors", header, bytes(8))
    open_fails(p2, "'a'", "'z'", "overlap")
    # Two tensors sharing the same bytes.
    header = {"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 0, 8)}
    p3 = write_file(tmp_path / "o3.safetensors", header, bytes(8))
    open_fails(p3, "'a'", "'b'", "overlap")


def test_reject_gap(tmp_path):
    header = {"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 12, 20)}
    p = write_file(tmp_path / "g.safetensors", header, bytes(20))
    open_fails(p, "gap of 4", "'a'", "'b'")
    header = {"a": entry("F32", [2], 4, 12)}
    p2 = write_file(tmp_path / "g2.safetensors", header, bytes(12))
    open_fails(p2, "starts with 4 unused bytes", "'a'")


def test_reject_offsets_out_of_range(tmp_path):
    header = {"a": entry("F32", [2], 0, 8), "b": entry("U8", [4], 8, 12)}
    p = write_file(tmp_path / "r.safetensors", header, bytes(10))
    open_fails(p, "'b'", "outside the data section of 10 bytes")
    # Offsets near 2^64 must not wrap around.
    header = {"a": entry("U8", [1], 2**64 - 1, 2**64 - 1 + 1)}
    p2 = tmp_path / "r2.safetensors"
    p2.write_bytes(raw_file(header_bytes(json.dumps(header)), b"x"))
    open_fails(p2, "'a'", "data_offsets must be")
    header = {"a": entry("U8", [1], 2**64 - 2, 2**64 - 1)}
    p3 = write_file(tmp_path / "r3.safetensors", header, b"x")
    open_fails(p3, "'a'", "outside the data section")


def test_reject_duplicate_names(tmp_path):
    text = '{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}'
    p = tmp_path / "d.safetensors"
    p.write_bytes(raw_file(header_bytes(text), b"ab"))
    open_fails(p, "duplicate key 'w'")
    # Duplicates inside an entry and inside __metadata__ too.
    text = '{"w":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    p2 = tmp_path / "d2.safetensors"
    p2.write_bytes(raw_file(header_bytes(text), b"a"))
    open_fails(p2, "duplicate key 'dtype'")
    text = '{"__metadata__":{"k":"a","k":"b"}}'
    p3 = tmp_path / "d3.safetensors"
    p3.write_bytes(raw_file(header_bytes(text)))
    open_fails(p3, "duplicate key 'k'")


@pytest.mark.parametrize("meta, fragment", [
    ({"k": 1}, "key 'k' is a number"),
    ({"k": None}, "key 'k' is null"),
    ({"k": ["a"]}, "key 'k' is an array"),
    ({"k": {"x": "y"}}, "key 'k' is an object"),
    (["a"], "__metadata__ is an array"),
    ("text", "__metadata__ is a string"),
    (None, "__metadata__ is null"),
])
def test_reject_non_string_metadata(tmp_path, meta, fragment):
    p = write_file(tmp_path / "m.safetensors", {"__metadata__": meta})
    open_fails(p, fragment)


def test_long_hostile_names_are_truncated_in_messages(tmp_path):
    name = "x" * 100_000
    header = {"ok": entry("U8", [24], 0, 24), name: entry("F128", [0], 24, 24)}
    p = write_file(tmp_path / "long.safetensors", header, bytes(24))
    msg = open_fails(p, "unknown dtype", "...'")
    assert len(msg) < 1000


def test_hostile_claims_do_not_allocate(tmp_path):
    """Opening files that claim huge sizes must fail with CheckpointError in a process whose address
    space is capped at 256 MiB above its current use: nothing is allocated from a claimed size."""
    cases = {
        "len.safetensors": raw_file(b"{}", header_len=2**63),
        "len2.safetensors": raw_file(b"{}      ", header_len=100 * 2**20),
        "shape.safetensors": raw_file(header_bytes({"a": entry("F32", [2**20, 2**20, 2**10], 0, 2**52)}), b"abcd"),
        "offsets.safetensors": raw_file(header_bytes({"a": entry("U8", [2**40], 0, 2**40)}), b"abcd"),
        "rank.safetensors": raw_file(header_bytes({"a": entry("U8", [1] * 10_000, 0, 1)}), b"a"),
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
    script = textwrap.dedent(f"""
        import resource, sys
        import markbase as mb, markbase.io as mio
        def vm_bytes():
            with open("/proc/self/statm") as fh:
                return int(fh.read().split()[0]) * resource.getpagesize()
        limit = vm_bytes() + 256 * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        for name in {sorted(cases)!r}:
            try:
                mio.SafetensorsFile({str(tmp_path)!r} + "/" + name)
            except mb.CheckpointError as e:
                print("ok", name)
            else:
                print("opened", name)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split("\n")[:-1]) == [f"ok {n}" for n in sorted(cases)], out.stdout + out.stderr


# ---------------------------------------------------------------- checkpoint directories

def make_sharded(root: Path, n_shards: int = 3) -> dict[str, np.ndarray]:
    """Writes a sharded checkpoint with the package's writer and an index; returns all tensors."""
    tensors: dict[str, np.ndarray] = {}
    weight_map = {}
    for s in range(n_shards):
        shard = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        part = {f"layers.{s}.{k}": random_array(np.float32 if k != "idx" else np.int64, (3, 5 + s)) for k in ("q", "k", "idx")}
        save_with_package(root / shard, {k: (v, None) for k, v in part.items()})
        tensors.update(part)
        weight_map.update({k: shard for k in part})
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map}))
    return tensors


def ckpt_fails(directory: Path, *fragments: str) -> str:
    with pytest.raises(mb.CheckpointError) as ei:
        open_checkpoint(directory)
    msg = str(ei.value)
    assert str(directory) in msg, msg
    for f in fragments:
        assert f in msg, msg
    return msg


def test_sharded_checkpoint_with_index(tmp_path):
    tensors = make_sharded(tmp_path)
    # A stray file outside the index is ignored.
    save_with_package(tmp_path / "extra.safetensors", {"stray": (np.ones(2, np.float32), None)})
    c = open_checkpoint(tmp_path)
    assert isinstance(c, Checkpoint)
    assert len(c) == len(tensors) and set(c.keys()) == set(tensors) and "stray" not in c
    assert [Path(p).name for p in c.files()] == [f"model-{s:05d}-of-00003.safetensors" for s in (1, 2, 3)]
    for name, arr in tensors.items():
        assert np.array_equal(c[name], arr) and c.shape(name) == arr.shape
        shard = int(name.split(".")[1]) + 1
        assert c.file_for(name) == str(tmp_path / f"model-{shard:05d}-of-00003.safetensors")
    t = c.tensor("layers.1.q")
    assert t.kind == "mapped" and np.array_equal(t.numpy(), tensors["layers.1.q"])
    assert c.dtype("layers.2.idx") == "I64"
    with pytest.raises(KeyError):
        c["nope"]


def test_single_file_checkpoint_and_glob_fallback(tmp_path):
    single = tmp_path / "single"
    single.mkdir()
    save_with_package(single / "model.safetensors", {"a": (np.ones(2, np.float32), None)})
    save_with_package(single / "other.safetensors", {"zzz": (np.ones(2, np.float32), None)})  # ignored
    c = open_checkpoint(single)
    assert c.keys() == ["a"] and c.files() == [str(single / "model.safetensors")]

    many = tmp_path / "many"
    many.mkdir()
    save_with_package(many / "b.safetensors", {"x": (np.ones(2, np.float32), None)})
    save_with_package(many / "a.safetensors", {"y": (np.zeros(3, np.int32), None)})
    (many / "notes.txt").write_text("not a checkpoint")
    c = open_checkpoint(str(many))
    assert c.keys() == ["y", "x"] and c.file_for("x") == str(many / "b.safetensors")


def test_reject_duplicate_tensor_across_files(tmp_path):
    save_with_package(tmp_path / "a.safetensors", {"w": (np.ones(2, np.float32), None)})
    save_with_package(tmp_path / "b.safetensors", {"w": (np.ones(2, np.float32), None)})
    ckpt_fails(tmp_path, "'w'", "a.safetensors", "b.safetensors", "both")


def test_reject_empty_or_missing_directory(tmp_path):
    ckpt_fails(tmp_path, "no model.safetensors.index.json")
    ckpt_fails(tmp_path / "nope", "does not exist")
    (tmp_path / "file").write_text("x")
    ckpt_fails(tmp_path / "file", "not a directory")


def test_reject_missing_shards_named_in_one_error(tmp_path):
    make_sharded(tmp_path)
    (tmp_path / "model-00001-of-00003.safetensors").unlink()
    (tmp_path / "model-00003-of-00003.safetensors").unlink()
    ckpt_fails(tmp_path, "missing shard files: model-00001-of-00003.safetensors, model-00003-of-00003.safetensors")


def test_reject_tensor_missing_from_its_shard(tmp_path):
    make_sharded(tmp_path)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    index["weight_map"]["ghost"] = "model-00002-of-00003.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    ckpt_fails(tmp_path, "missing from their shards", "'ghost'", "model-00002-of-00003.safetensors")


def test_reject_shard_tensor_absent_from_index(tmp_path):
    make_sharded(tmp_path)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    del index["weight_map"]["layers.0.k"]
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    ckpt_fails(tmp_path, "'layers.0.k'", "index does not list", "model-00001-of-00003.safetensors")


@pytest.mark.parametrize("shard", ["../model.safetensors", "sub/x.safetensors", "/etc/passwd", "..", "", "a\\b.safetensors"])
def test_reject_shard_escaping_directory(tmp_path, shard):
    ck = tmp_path / "ck"
    ck.mkdir()
    save_with_package(tmp_path / "model.safetensors", {"w": (np.ones(2, np.float32), None)})
    (ck / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": shard}}))
    ckpt_fails(ck, "'w'", "not a plain file name")


@pytest.mark.parametrize("index, fragment", [
    ("{not json", "invalid JSON"),
    ("[]", "top level is an array"),
    ('{"metadata": {}}', 'missing "weight_map"'),
    ('{"weight_map": []}', "weight_map is an array"),
    ('{"weight_map": {}}', "weight_map is empty"),
    ('{"weight_map": {"w": 3}}', "is a number, expected a shard file name"),
    ('{"weight_map": {"w": "a.safetensors", "w": "a.safetensors"}}', "duplicate key 'w'"),
])
def test_reject_malformed_index(tmp_path, index, fragment):
    save_with_package(tmp_path / "a.safetensors", {"w": (np.ones(2, np.float32), None)})
    (tmp_path / "model.safetensors.index.json").write_text(index)
    msg = ckpt_fails(tmp_path, fragment)
    assert "model.safetensors.index.json" in msg


def test_bad_shard_is_named(tmp_path):
    make_sharded(tmp_path)
    shard = tmp_path / "model-00002-of-00003.safetensors"
    shard.write_bytes(shard.read_bytes() + b"junk")
    msg = ckpt_fails(tmp_path, "trailing bytes")
    assert str(shard) in msg


def test_json_depth_limit_and_no_stack_overflow(tmp_path):
    # 64 levels parse (and are then rejected as a non-object header); 65 are a JSON error; a million
    # nested brackets are rejected without recursing a million times.
    p = tmp_path / "d64.safetensors"
    p.write_bytes(raw_file(("[" * 64 + "]" * 64).encode()))
    msg = open_fails(p, "header is an array")
    assert "invalid header" not in msg
    p.write_bytes(raw_file(("[" * 65 + "]" * 65).encode()))
    open_fails(p, "invalid header", "deeper than 64")
    p.write_bytes(raw_file(b"[" * 1_000_000))
    open_fails(p, "invalid header", "deeper than 64")


def test_json_value_count_limit(tmp_path):
    # A header that is one huge array of small numbers stops at the value limit instead of building
    # a parse tree proportional to the file.
    p = tmp_path / "many.safetensors"
    p.write_bytes(raw_file(b"[" + b"0," * 3_000_000 + b"0]"))
    open_fails(p, "invalid header", "more than 2097152 JSON values")
