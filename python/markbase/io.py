"""Strict, memory-mapped safetensors reading.

    from markbase.io import SafetensorsFile, open_checkpoint

    f = SafetensorsFile("model.safetensors")     # validates the whole header, maps the file read-only
    f.keys(), len(f), "name" in f, f.dtype("name"), f.shape("name"), f.metadata
    f["name"]          # zero-copy, read-only numpy array (bf16 as uint16, F8 as uint8)
    f.tensor("name")   # zero-copy markbase.Tensor (F32 BF16 F16 I32 I64 U8 BOOL only)

    ckpt = open_checkpoint("path/to/dir")        # index.json shards, model.safetensors, or *.safetensors

Every problem with a file or directory raises ``markbase.CheckpointError`` naming the file (and the
tensor where there is one). A missing tensor name raises ``TensorNotFoundError``, which is both a
``CheckpointError`` and a ``KeyError``, so either ``except`` clause catches it.

Arrays and tensors keep the mapping alive on their own: the file object can be dropped.
``keys()`` lists tensors in file order (by data offset); for a checkpoint, files in ``files()`` order.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Union

import numpy as np

from . import _core
from ._core import CheckpointError, Tensor

PathLike = Union[str, "os.PathLike[str]"]

__all__ = ["SafetensorsFile", "Checkpoint", "open_checkpoint", "TensorNotFoundError", "CheckpointError"]


class TensorNotFoundError(CheckpointError, KeyError):
    """No tensor of that name: a CheckpointError and a KeyError (the mapping protocol's error)."""

    # KeyError would repr() the message (adding quotes); keep the plain text.
    __str__ = BaseException.__str__


def _fspath(path: PathLike) -> str:
    return os.fsdecode(os.fspath(path))


class _TensorSource:
    """Mapping-like read access shared by single files and checkpoint directories."""

    _impl: _core.io.SafetensorsFile | _core.io.Checkpoint
    _what: str

    def keys(self) -> list[str]:
        return list(self._impl.keys())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._impl.contains(name)

    def __len__(self) -> int:
        return len(self._impl)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def _require(self, name: object) -> str:
        if name not in self:
            raise TensorNotFoundError(f"{self._what}: no tensor named {name!r}")
        return name  # type: ignore[return-value]

    def dtype(self, name: str) -> str:
        """The dtype string as written in the file, e.g. "BF16"."""
        return self._impl.dtype(self._require(name))

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._impl.shape(self._require(name)))

    def offsets(self, name: str) -> tuple[int, int]:
        """[begin, end) byte range of the tensor relative to its file's data section."""
        return tuple(self._impl.offsets(self._require(name)))  # type: ignore[return-value]

    def __getitem__(self, name: str) -> np.ndarray:
        """Zero-copy, read-only numpy view of the tensor's bytes in the mapping.

        numpy dtypes: F64 float64, F32 float32, F16 float16, BF16 uint16 (raw bits), I64 int64,
        I32 int32, I16 int16, I8 int8, U8 uint8, BOOL bool, F8_E4M3 / F8_E5M2 uint8 (raw bits).
        """
        return self._impl.array(self._require(name))

    def tensor(self, name: str) -> Tensor:
        """Zero-copy read-only markbase.Tensor. CheckpointError for dtypes markbase cannot compute
        with (F64 I16 I8 F8_E4M3 F8_E5M2: use ``[name]`` for their bytes)."""
        return self._impl.tensor(self._require(name))


class SafetensorsFile(_TensorSource):
    """One validated, read-only memory-mapped safetensors file."""

    def __init__(self, path: PathLike):
        self._impl = _core.io.SafetensorsFile(_fspath(path))
        self._what = f"safetensors file '{self._impl.path}'"

    @property
    def path(self) -> str:
        return self._impl.path

    @property
    def metadata(self) -> dict[str, str]:
        """The ``__metadata__`` object (string -> string); empty when absent."""
        return dict(self._impl.metadata)

    def __repr__(self) -> str:
        return f"markbase.io.SafetensorsFile({self.path!r}, {len(self)} tensors)"


class Checkpoint(_TensorSource):
    """The tensors of a checkpoint directory (see open_checkpoint)."""

    def __init__(self, directory: PathLike):
        self._impl = _core.io.Checkpoint.open(_fspath(directory))
        self._what = f"checkpoint '{self._impl.dir}'"

    @property
    def dir(self) -> str:
        return self._impl.dir

    def files(self) -> list[str]:
        """Paths of the safetensors files, in key order."""
        return list(self._impl.files())

    def file_for(self, name: str) -> str:
        """Path of the file that holds ``name``."""
        return self._impl.file_for(self._require(name))

    def __repr__(self) -> str:
        return f"markbase.io.Checkpoint({self.dir!r}, {len(self)} tensors in {len(self.files())} files)"


def open_checkpoint(directory: PathLike) -> Checkpoint:
    """Opens a checkpoint directory: ``model.safetensors.index.json`` (sharded), else
    ``model.safetensors``, else every ``*.safetensors`` file. Every file is fully validated."""
    return Checkpoint(directory)
