"""Helpers for the safetensors reader tests: files written by the `safetensors` package, and
hand-built (possibly malformed) files for the rejection tests."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import safetensors
import safetensors.numpy

ITEMSIZE = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "U32": 4, "BOOL": 1,
    "F8_E4M3": 1, "F8_E5M2": 1,
}
# safetensors' writer names for dtypes numpy has no native type for (bits passed as uint16 / uint8).
WRITER_DTYPE = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def save_with_package(path: Path, tensors: dict[str, tuple[np.ndarray, str | None]], metadata=None) -> Path:
    """Writes with the `safetensors` package's own serializer. Each value is (array, file_dtype):
    file_dtype None lets the package pick from the numpy dtype; "BF16"/"F8_*" reinterpret the
    array's raw bits (uint16 / uint8)."""
    plain = {k: a for k, (a, dt) in tensors.items() if dt is None}
    if len(plain) == len(tensors):
        safetensors.numpy.save_file({k: np.ascontiguousarray(a) for k, a in plain.items()}, str(path), metadata=metadata)
        return path
    keep = []
    specs = {}
    for name, (arr, dt) in tensors.items():
        arr = np.ascontiguousarray(arr)
        keep.append(arr)
        specs[name] = safetensors.TensorSpec(
            dtype=WRITER_DTYPE[dt] if dt else arr.dtype.name, shape=arr.shape, data_ptr=arr.ctypes.data, data_len=arr.nbytes
        )
    safetensors.serialize_file(specs, str(path), metadata=metadata)
    return path


def raw_file(header: bytes, data: bytes = b"", header_len: int | None = None) -> bytes:
    """[u64 LE header length][header][data]; `header_len` overrides the length field."""
    n = len(header) if header_len is None else header_len
    return struct.pack("<Q", n) + header + data


def header_bytes(header: dict | str, pad: bool = True) -> bytes:
    """JSON-encodes a header (or takes a str verbatim) and pads it with spaces to 8 bytes, as the writer does."""
    text = header if isinstance(header, str) else json.dumps(header, separators=(",", ":"))
    b = text.encode("utf-8")
    if pad:
        b += b" " * (-len(b) % 8)
    return b


def write_file(path: Path, header: dict | str, data: bytes = b"", header_len: int | None = None) -> Path:
    path.write_bytes(raw_file(header_bytes(header), data, header_len))
    return path


def entry(dtype: str, shape: list, begin: int, end: int) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def packed(tensors: dict[str, tuple[str, list[int]]], metadata: dict | None = None) -> tuple[dict, bytes]:
    """A valid header for tensors laid out back to back in the given order, and matching data bytes
    (deterministic, non-zero)."""
    header: dict = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    off = 0
    for name, (dt, shape) in tensors.items():
        n = ITEMSIZE[dt] * int(np.prod(shape, dtype=np.int64))
        header[name] = entry(dt, list(shape), off, off + n)
        off += n
    data = bytes((i * 7 + 3) & 0xFF for i in range(off))
    return header, data
