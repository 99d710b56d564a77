"""Writing checkpoints in MLX's quantized format (what mlx-vlm's convert writes and the mlx-community
Gemma 4 uploads hold), which `markbase.load` reads in place. (This writer makes 4- and 8-bit matrices; the
loader also reads MLX's 1-3 and 5-6 bit widths, widening them at load (ops.widen_affine_bits), except the PLE
table, which the embedding gather reads at its stored width.)

Format: a quantized matrix `P.weight` [.., N, K] is stored as `P.weight` U32 [.., N, K·bits/32] (values
packed least-significant first: 4-bit element j in bits 4j..4j+3 of its word, 8-bit element j in byte
j), beside `P.scales` and `P.biases` [.., N, K/group_size] in the source dtype; w = scales·q + biases per
group. config.json carries "quantization" (and the same as "quantization_config"): {"group_size",
"bits", "mode": "affine"} plus a {"group_size", "bits"} entry for each module quantized to other bits.
Names follow mlx-vlm's sanitize: "model.language_model.X" -> "language_model.model.X", "model.vision_tower.X"
-> "vision_tower.X" (and embed_vision, audio_tower, embed_audio alike), the experts' gate_up_proj
[E, 2I, H] split into switch_glu.gate_proj / up_proj [E, I, H], down_proj -> switch_glu.down_proj.weight,
audio conv kernels channels-last.

Writing streams: one matrix is quantized at a time, a block of rows at a time, so memory stays near one
matrix's quantized size whatever the checkpoint's.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from ._core import InputError, MarkbaseError, Tensor
from ._core import ops as _ops

ROW_BLOCK_BYTES = 32 << 20  # source rows quantized per step
_ST_NAME = {"bf16": "BF16", "f32": "F32", "f16": "F16", "u8": "U8"}
_ITEMSIZE = {"BF16": 2, "F16": 2, "F32": 4, "U32": 4, "U8": 1, "I32": 4, "I64": 8, "BOOL": 1}


@dataclass
class OutTensor:
    """One tensor of the output: its safetensors entry and a function that writes its bytes."""
    name: str
    dtype: str  # safetensors dtype string
    shape: tuple[int, ...]
    write: Callable[[object], None]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * _ITEMSIZE[self.dtype]


def mlx_name(name: str) -> str:
    """The name mlx-vlm's sanitize gives a transformers tensor name."""
    if name.startswith("model.language_model.model."):
        return "language_model.model." + name[len("model.language_model.model."):]
    if name.startswith("model.language_model."):
        return "language_model.model." + name[len("model.language_model."):]
    for part in ("vision_tower.", "embed_vision.", "audio_tower.", "embed_audio."):
        if name.startswith("model." + part):
            return name[len("model."):]
    return name  # a text-only checkpoint's "model.*" stays as mlx-lm names it


def quantized(name: str, shape: tuple[int, ...], source_dtype: str, rows: Callable[[int, int], Tensor],
              bits: int, group_size: int) -> list[OutTensor]:
    """The three tensors of matrix `name` ([.., N, K], rows flattened over the leading dims) quantized to
    `bits`: rows(r0, r1) gives source rows [r0, r1) as a Tensor [r1 − r0, K]. The packed weight is written
    first; its scales and biases, gathered while it streams, right after it (keep the three together)."""
    K = shape[-1]
    total_rows = int(np.prod(shape[:-1], dtype=np.int64))
    block = max(1, ROW_BLOCK_BYTES // max(1, K * 2))
    base = name[: -len(".weight")] if name.endswith(".weight") else name
    scale_parts: list[np.ndarray] = []
    bias_parts: list[np.ndarray] = []

    def write_weight(f) -> None:
        scale_parts.clear()
        bias_parts.clear()
        for r0 in range(0, total_rows, block):
            q, s, b = _ops.quantize(rows(r0, min(total_rows, r0 + block)), bits=bits, group_size=group_size,
                                    scale_dtype=source_dtype)
            f.write(q.numpy().tobytes())
            scale_parts.append(s.numpy().copy())
            bias_parts.append(b.numpy().copy())

    def writer(parts: list[np.ndarray]):
        def write(f) -> None:
            for p in parts:
                f.write(p.tobytes())
            parts.clear()
        return write

    st = _ST_NAME[source_dtype]
    groups_shape = (*shape[:-1], K // group_size)
    return [OutTensor(name, "U32", (*shape[:-1], K * bits // 32), write_weight),
            OutTensor(base + ".scales", st, groups_shape, writer(scale_parts)),
            OutTensor(base + ".biases", st, groups_shape, writer(bias_parts))]


def write_checkpoint(dst: str, tensors: list[OutTensor], shard_bytes: int, metadata: dict[str, str]) -> None:
    """Writes `tensors` in order as model.safetensors, or as shards of about shard_bytes with an index;
    a quantized triple is never split across shards (its scales are gathered while its weight streams)."""
    groups: list[list[OutTensor]] = []
    for t in tensors:
        if groups and (t.name.endswith(".scales") or t.name.endswith(".biases")):
            groups[-1].append(t)
        else:
            groups.append([t])
    # Groups of 4-byte items first: every F32 tensor then starts 4-byte aligned in the file (the header is
    # padded to 8), as the reader requires; U32 packed weights are read as bytes and need no alignment.
    groups.sort(key=lambda g: 0 if all(_ITEMSIZE[t.dtype] % 4 == 0 for t in g) else 1)
    shards: list[list[OutTensor]] = [[]]
    used = 0
    for g in groups:
        n = sum(t.nbytes for t in g)
        if shards[-1] and used + n > shard_bytes:
            shards.append([])
            used = 0
        shards[-1].extend(g)
        used += n
    if len(shards) == 1:
        _write_file(os.path.join(dst, "model.safetensors"), shards[0], metadata)
        return
    weight_map, total = {}, 0
    for i, part in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        total += _write_file(os.path.join(dst, fname), part, metadata)
        weight_map.update({t.name: fname for t in part})
    with open(os.path.join(dst, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def _write_file(path: str, tensors: list[OutTensor], metadata: dict[str, str]) -> int:
    header: dict[str, object] = {"__metadata__": metadata}
    offset = 0
    for t in tensors:
        header[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for t in tensors:
            start = f.tell()
            t.write(f)
            if f.tell() - start != t.nbytes:
                raise AssertionError(f"{path}: {t.name} wrote {f.tell() - start} bytes, its entry says {t.nbytes}")
    return offset


def quantization_config(bits: int, group_size: int, overrides: dict[str, int]) -> dict:
    """config.json's "quantization": the default, then each module quantized to other bits."""
    q: dict[str, object] = {"group_size": group_size, "bits": bits, "mode": "affine"}
    for module, b in sorted(overrides.items()):
        q[module] = {"group_size": group_size, "bits": b}
    return q


def read_quantization(path: str):
    """config.json's "quantization" block as stored (None when absent or unreadable)."""
    from .files import CHECKPOINT_JSON_MAX_BYTES, read_checkpoint_text

    try:
        return json.loads(read_checkpoint_text(os.path.join(path, "config.json"), CHECKPOINT_JSON_MAX_BYTES)
                          ).get("quantization")
    except (MarkbaseError, ValueError, AttributeError):
        return None


def declared_value(block, base: str, key: str) -> int | None:
    """The `key` ("bits" / "group_size") a quantization block gives module `base` (a weight's name without
    ".weight"): its own entry (a mixed recipe's), else the model's; None when it says nothing usable. MLX builds
    each layer from these, so a checkpoint MLX loads stores each matrix as declared (validate checks it)."""
    if not isinstance(block, dict):
        return None
    entry = block.get(base, block)
    value = entry.get(key) if isinstance(entry, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _raw_rows(src, name: str) -> Iterator[bytes]:
    arr = src[name]
    step = max(1, ROW_BLOCK_BYTES // max(1, arr[0].nbytes if arr.ndim else arr.nbytes))
    if arr.ndim == 0:
        yield arr.tobytes()
        return
    for r in range(0, arr.shape[0], step):
        yield np.ascontiguousarray(arr[r:r + step]).tobytes()


def quantize_checkpoint(src: str | os.PathLike, dst: str | os.PathLike, bits: int = 4, group_size: int = 64,
                        shard_bytes: int = 4 << 30, embedding_bits: int = 8) -> dict[str, int]:
    """Writes src (a transformers Gemma 4 checkpoint) to dst in MLX's quantized format: the decoder's
    attention, MLP and expert matrices to `bits`, the tied embedding / LM head to `embedding_bits` (8 or 4,
    as load's) and the PLE table (a gather) to 8 bits; norms, router, PLE projections and the vision /
    audio encoders stay as stored. Returns {"quantized": n, "kept": n, "bytes": n}."""
    from .io import open_checkpoint
    from .models.gemma4 import load_config, weight_table
    from .validate import require_valid

    src, dst = os.fspath(src), os.fspath(dst)
    if bits not in (4, 8):
        raise InputError(f"quantize: bits must be 4 or 8, got {bits!r}")
    if group_size not in (32, 64, 128):
        raise InputError(f"quantize: group_size must be 32, 64 or 128, got {group_size!r}")
    if isinstance(embedding_bits, bool) or embedding_bits not in (4, 8):
        raise InputError(f"quantize: embedding_bits must be 4 or 8, got {embedding_bits!r}")
    if os.path.abspath(src) == os.path.abspath(dst):
        raise InputError(f"quantize: the output directory must differ from the input ({src})")
    require_valid(src)
    from .files import CHECKPOINT_JSON_MAX_BYTES, read_checkpoint_text

    raw_cfg = json.loads(read_checkpoint_text(os.path.join(src, "config.json"), CHECKPOINT_JSON_MAX_BYTES))
    if "quantization" in raw_cfg:
        raise InputError(f"quantize: {src} is already quantized (its config.json has 'quantization')")
    cfg = load_config(src)
    ckpt = open_checkpoint(src)
    stored_as = {}
    for spec in weight_table(cfg):
        for n in (spec.name, *spec.aliases):
            if n in ckpt:
                stored_as[n] = spec
    out: list[OutTensor] = []
    overrides: dict[str, int] = {}
    counts = {"quantized": 0, "kept": 0}
    for name in ckpt.keys():
        spec = stored_as.get(name)
        if spec is None or not spec.required:
            continue  # ignorable tensors (an untied lm_head, KV-reuse layers' k/v) are not written
        target = mlx_name(spec.name)  # the canonical name, whatever alias the source used
        dtype = ckpt.dtype(name)
        src_dtype = {"BF16": "bf16", "F16": "f16", "F32": "f32"}[dtype]
        want_bits = {"matrix": bits, "table": embedding_bits}.get(spec.quant, 0)
        if "embed_tokens_per_layer" in name:
            want_bits = 8  # a gather: 8 bits keep it near-exact at half the size
        K = spec.shape[-1] if spec.shape else 0
        if spec.linear:
            for piece, shape, rows in _matrix_pieces(ckpt.tensor(name), target, tuple(spec.shape)):
                if want_bits and K % group_size == 0:
                    out += quantized(piece, shape, src_dtype, rows, want_bits, group_size)
                    if want_bits != bits:
                        overrides[_module_path(piece)] = want_bits
                    counts["quantized"] += 1
                else:
                    out.append(_dense(piece, dtype, shape, rows))
                    counts["kept"] += 1
            continue
        shape = tuple(ckpt.shape(name))
        if "audio_tower." in target and len(shape) == 4 and target.endswith("conv.weight"):
            # MLX's conv kernels are channels-last: [O, I, kH, kW] -> [O, kH, kW, I]
            arr = ckpt[name]
            out.append(OutTensor(target, dtype, (shape[0], shape[2], shape[3], shape[1]),
                                 lambda f, arr=arr: f.write(np.ascontiguousarray(arr.transpose(0, 2, 3, 1)).tobytes())))
        elif "audio_tower." in target and len(shape) == 3 and shape[1] == 1 and "depthwise" in target:
            out.append(OutTensor(target, dtype, (shape[0], shape[2], 1),
                                 lambda f, name=name: [f.write(b) for b in _raw_rows(ckpt, name)]))
        else:
            out.append(OutTensor(target, dtype, shape, lambda f, name=name: [f.write(b) for b in _raw_rows(ckpt, name)]))
        counts["kept"] += 1
    os.makedirs(dst, exist_ok=True)
    write_checkpoint(dst, out, shard_bytes, {"format": "mlx", "generator": "markbase quantize"})
    qcfg = quantization_config(bits, group_size, overrides)
    raw_cfg["quantization"] = qcfg
    raw_cfg["quantization_config"] = qcfg
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(raw_cfg, f, indent=2)
    for fname in os.listdir(src):
        if fname == "config.json" or fname.endswith(".safetensors") or fname == "model.safetensors.index.json":
            continue
        if os.path.isfile(os.path.join(src, fname)):
            shutil.copy2(os.path.join(src, fname), os.path.join(dst, fname))
    counts["bytes"] = sum(t.nbytes for t in out)
    return counts


def mlx_pieces(target: str, shape: tuple[int, ...]) -> list[tuple[str, tuple[int, ...], int | None]]:
    """(MLX name, shape, half) of the tensors a matrix is stored as: the experts' gate_up_proj [E, 2I, H]
    as switch_glu.gate_proj (half 0) and up_proj (half 1) [E, I, H] (mlx-vlm's sanitize), down_proj as
    switch_glu.down_proj.weight, any other matrix as itself (half None)."""
    if target.endswith(".experts.gate_up_proj"):
        E, I2, H = shape
        stem = target[: -len("gate_up_proj")] + "switch_glu."
        return [(stem + "gate_proj.weight", (E, I2 // 2, H), 0), (stem + "up_proj.weight", (E, I2 // 2, H), 1)]
    if target.endswith(".experts.down_proj"):
        target = target[: -len("down_proj")] + "switch_glu.down_proj.weight"
    return [(target, shape, None)]


def _matrix_pieces(t: Tensor, target: str, shape: tuple[int, ...]):
    """mlx_pieces with, for each, rows(r0, r1) reading its rows (leading dims flattened) from t."""
    out = []
    for name, piece_shape, half in mlx_pieces(target, shape):
        if half is None:
            flat = t.reshape((int(np.prod(shape[:-1])), shape[-1])) if len(shape) > 2 else t
            out.append((name, piece_shape, lambda r0, r1, flat=flat: flat.slice(0, r0, r1)))
        else:
            n = piece_shape[1]
            out.append((name, piece_shape, _stacked_rows(t.slice(1, half * n, (half + 1) * n), n)))
    return out


def _dense(name: str, dtype: str, shape: tuple[int, ...], rows: Callable[[int, int], Tensor]) -> OutTensor:
    """An unquantized matrix written from its rows, a block at a time."""
    total = int(np.prod(shape[:-1], dtype=np.int64))
    block = max(1, ROW_BLOCK_BYTES // max(1, shape[-1] * _ITEMSIZE[dtype]))

    def write(f) -> None:
        for r0 in range(0, total, block):
            f.write(rows(r0, min(total, r0 + block)).contiguous().numpy().tobytes())
    return OutTensor(name, dtype, shape, write)


def _module_path(weight_name: str) -> str:
    return weight_name[: -len(".weight")] if weight_name.endswith(".weight") else weight_name


def _stacked_rows(view: Tensor, n: int) -> Callable[[int, int], Tensor]:
    """Rows [r0, r1) of a stacked [E, n, K] view (not contiguous across experts) as a contiguous [r1 − r0, K]."""
    def rows(r0: int, r1: int) -> Tensor:
        parts = []
        r = r0
        while r < r1:
            e, i = divmod(r, n)
            take = min(r1 - r, n - i)
            parts.append(view.select(0, e).slice(0, i, i + take).contiguous().numpy())
            r += take
        return Tensor(np.concatenate(parts), dtype=view.dtype)
    return rows
