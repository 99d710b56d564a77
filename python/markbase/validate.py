"""Checkpoint validation: completeness, shapes, dtypes, readable shards and finite weights.

`validate(path)` returns a Report; `markbase validate DIR` prints it. `markbase.load` runs the structural
part (everything but the value scan) and raises CheckpointError carrying the same findings.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from . import _core, args
from ._core import CheckpointError, ConfigError, MarkbaseError
from .files import read_checkpoint_file
from .mlx_format import declared_value, read_quantization

FLOAT_DTYPES = {"F32", "BF16", "F16"}
INDEX_FILE = "model.safetensors.index.json"


@dataclass
class Report:
    path: str
    family: str = "?"
    tensors_expected: int = 0
    tensors_found: int = 0
    config_error: str | None = None
    shard_errors: list[str] = field(default_factory=list)        # missing / unreadable shard files
    missing: dict[str, list[str]] = field(default_factory=dict)  # "text layer 34" -> short names
    missing_total: dict[str, int] = field(default_factory=dict)  # "text layer 34" -> tensors expected there
    unexpected: list[str] = field(default_factory=list)
    shape_mismatches: list[str] = field(default_factory=list)
    dtype_mismatches: list[str] = field(default_factory=list)
    nonfinite: list[str] = field(default_factory=list)
    values_scanned: bool = False

    @property
    def structural_ok(self) -> bool:
        return not (self.config_error or self.shard_errors or self.missing or self.unexpected
                    or self.shape_mismatches or self.dtype_mismatches)

    @property
    def ok(self) -> bool:
        return self.structural_ok and not self.nonfinite

    def findings(self) -> list[str]:
        out: list[str] = []
        if self.config_error:
            out.append(f"config: {self.config_error}")
        out += [f"shard: {e}" for e in self.shard_errors]
        for group, names in self.missing.items():
            shown = ", ".join(names[:8]) + (", …" if len(names) > 8 else "")
            out.append(f"{group}: missing {len(names)} of {self.missing_total.get(group, len(names))} tensors: {shown}")
        if self.unexpected:
            shown = ", ".join(self.unexpected[:8]) + (", …" if len(self.unexpected) > 8 else "")
            out.append(f"unexpected tensors ({len(self.unexpected)}): {shown}")
        out += [f"shape mismatch: {m}" for m in self.shape_mismatches]
        out += [f"dtype mismatch: {m}" for m in self.dtype_mismatches]
        out += [f"non-finite values: {m}" for m in self.nonfinite]
        return out

    def __str__(self) -> str:
        head = (f"checkpoint {self.path}\n  family: {self.family}\n"
                f"  tensors: {self.tensors_found} found, {self.tensors_expected} expected\n"
                f"  values: {'scanned' if self.values_scanned else 'not scanned'}\n")
        f = self.findings()
        if not f:
            return head + "  OK: no problems found\n"
        return head + f"  {len(f)} problem(s):\n" + "".join(f"  - {line}\n" for line in f)


def _shard_files(path: str, report: Report) -> dict[str, list[str] | None]:
    """file name -> tensor names the index assigns to it (None when there is no index)."""
    index = os.path.join(path, INDEX_FILE)
    if os.path.exists(index):
        try:
            weight_map = json.loads(read_checkpoint_file(index, _core.io.MAX_INDEX_BYTES))["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError("weight_map is not an object")
        except Exception as e:  # noqa: BLE001 - reported as a finding
            report.shard_errors.append(f"{index}: unreadable index ({e})")
            return {}
        files: dict[str, list[str] | None] = {}
        for name, fname in weight_map.items():
            if not isinstance(fname, str) or "/" in fname or "\\" in fname or fname in ("", ".", ".."):
                report.shard_errors.append(f"{index}: tensor {name} names an invalid shard file {fname!r}")
                continue
            files.setdefault(fname, []).append(name)  # type: ignore[union-attr]
        return files
    single = os.path.join(path, "model.safetensors")
    if os.path.exists(single):
        return {"model.safetensors": None}
    found = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if not found:
        report.shard_errors.append(f"{path}: no *.safetensors files")
    return {f: None for f in found}


def _nonfinite_count(arr: np.ndarray, dtype: str) -> int:
    """NaN/Inf count, streaming in blocks so huge tensors never need a float copy."""
    flat = arr.reshape(-1)
    total = 0
    block = 1 << 22
    for s in range(0, flat.size, block):
        chunk = flat[s:s + block]
        if dtype == "BF16":
            total += int(np.count_nonzero((chunk & 0x7F80) == 0x7F80))
        elif dtype == "F16":
            total += int(np.count_nonzero((chunk.view(np.uint16) & 0x7C00) == 0x7C00))
        else:
            total += int(chunk.size - np.count_nonzero(np.isfinite(chunk)))
    return total


class _Progress:
    """A one-line stderr progress bar, shown only for long scans on a terminal."""

    def __init__(self, total_bytes: int, label: str, enabled: bool | None = None):
        self.total = max(total_bytes, 1)
        self.done = 0
        self.label = label
        self.enabled = (total_bytes > (1 << 30) and sys.stderr.isatty()) if enabled is None else enabled
        self.last = 0.0

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        now = time.monotonic()
        if self.enabled and (now - self.last > 0.2 or self.done >= self.total):
            self.last = now
            frac = self.done / self.total
            bar = "#" * int(frac * 30)
            sys.stderr.write(f"\r{self.label} [{bar:<30}] {frac * 100:5.1f}% ({self.done / 1e9:.2f}/{self.total / 1e9:.2f} GB)")
            if self.done >= self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


@args.checked_call
def validate(path: str | os.PathLike, scan_values: bool = True, progress: bool | None = None) -> Report:
    """Checks a checkpoint directory against the weight table of its config.json."""
    from .io import SafetensorsFile
    from .models.gemma4 import load_config, weight_table
    from .models.gemma4.weights import layer_of, short_name, text_prefix

    path = args.path(path, "validate: path")
    scan_values = args.boolean(scan_values, "validate: scan_values")
    progress = None if progress is None else args.boolean(progress, "validate: progress")
    report = Report(path=path)
    if not os.path.isdir(path):
        report.shard_errors.append(f"{path} is not a checkpoint directory")
        return report
    try:
        cfg = load_config(path)
    except ConfigError as e:
        report.config_error = str(e)
        return report
    report.family = cfg.family
    mode_error = _quantization_mode_error(path)
    if mode_error:
        report.config_error = mode_error
        return report
    table = weight_table(cfg)
    by_name = {}
    for spec in table:
        by_name[spec.name] = spec
        for a in spec.aliases:
            by_name[a] = spec
    report.tensors_expected = sum(1 for s in table if s.required)

    files = _shard_files(path, report)
    present: dict[str, tuple[str, object]] = {}  # tensor name -> (file, SafetensorsFile)
    for fname, listed in files.items():
        fpath = os.path.join(path, fname)
        if not os.path.exists(fpath):
            n = len(listed or [])
            report.shard_errors.append(f"missing shard file {fname} (the index assigns {n} tensors to it)")
            continue
        try:
            sf = SafetensorsFile(fpath)
        except MarkbaseError as e:
            report.shard_errors.append(f"unreadable shard {fname}: {e}")
            continue
        keys = set(sf.keys())
        for name in listed or []:
            if name not in keys:
                report.shard_errors.append(f"{fname}: the index lists tensor {name} but the file does not hold it")
        for name in keys:
            if name in present:
                report.shard_errors.append(f"tensor {name} appears in both {present[name][0]} and {fname}")
            present[name] = (fname, sf)

    prefix = text_prefix(cfg)
    seen_specs: set[str] = set()
    half_of: dict[str, tuple[object, int]] = {}  # MLX's stored half name -> (spec, 0 | 1)
    for spec in table:
        for pair in spec.split_halves:
            for i, n in enumerate(pair):
                half_of[n] = (spec, i)
    quant_parts = _quantized_parts(present, by_name, half_of)
    declared = read_quantization(path)
    halves_seen: dict[str, set[int]] = defaultdict(set)
    for name, (fname, sf) in sorted(present.items()):
        if name in quant_parts:
            continue  # `<base>.scales` / `<base>.biases` of an MLX-quantized matrix: checked with it
        spec = by_name.get(name)
        if spec is None and name in half_of:
            spec, i = half_of[name]
            halves_seen[spec.name].add(i)
            want = list(spec.shape)
            want[-2] //= 2
            _check_stored(name, fname, sf, tuple(want), present, report, declared=declared)
            if len(halves_seen[spec.name]) == 2:
                seen_specs.add(spec.name)
            continue
        if spec is None:
            report.unexpected.append(name)
            continue
        if spec.name in seen_specs:
            report.shard_errors.append(f"tensor {spec.name} is stored twice (also as {name})")
        seen_specs.add(spec.name)
        _check_stored(name, fname, sf, spec.shape, present, report, mlx_name=not name.startswith("model.") and name != spec.name,
                      declared=declared)

    groups: dict[str, list[str]] = defaultdict(list)
    totals: dict[str, int] = defaultdict(int)
    for spec in table:
        if not spec.required:
            continue
        totals[layer_of(spec)] += 1
        if spec.name not in seen_specs:
            groups[layer_of(spec)].append(short_name(spec, prefix if spec.component == "text" else "model."))
    report.missing = dict(groups)
    report.missing_total = {g: totals[g] for g in groups}
    report.tensors_found = len(seen_specs & {s.name for s in table if s.required})

    if scan_values:
        todo = [(n, f, sf) for n, (f, sf) in sorted(present.items()) if sf.dtype(n) in FLOAT_DTYPES]
        total = sum(int(np.prod(sf.shape(n), dtype=np.int64)) * (4 if sf.dtype(n) == "F32" else 2) for n, _, sf in todo)
        bar = _Progress(total, f"scanning {os.path.basename(path) or path}", progress)
        for name, fname, sf in todo:
            arr = sf[name]
            bad = _nonfinite_count(arr, sf.dtype(name))
            if bad:
                report.nonfinite.append(f"{name} in {fname}: {bad} NaN/Inf of {arr.size}")
            bar.advance(arr.nbytes)
        report.values_scanned = True
    return report


def _quantization_mode_error(path: str) -> str | None:
    """config.json's MLX "quantization" block names a mode markbase reads (affine), or is absent."""
    q = read_quantization(path)
    if q is None:
        return None
    if not isinstance(q, dict):
        return f"{path}/config.json: quantization must be an object (MLX's {{group_size, bits, mode}}), got {q!r}"
    mode = q.get("mode", "affine")
    if mode != "affine":
        return (f"{path}/config.json: quantization mode {mode!r} is not supported: markbase reads MLX's affine "
                "weights (mode 'affine', 1-6 or 8 bits); requantize with mode affine")
    return None


def _quant_base(name: str) -> str:
    return name[: -len(".weight")] if name.endswith(".weight") else name


def _quantized_parts(present: dict, by_name: dict, half_of: dict) -> set[str]:
    """Names of the scales / biases that belong to a matrix of the table stored MLX-quantized."""
    parts = set()
    for name in present:
        if name in by_name or name in half_of:
            base = _quant_base(name)
            for suffix in (".scales", ".biases"):
                if base + suffix in present:
                    parts.add(base + suffix)
    return parts


def _mlx_layout(stored: tuple, want: tuple) -> bool:
    """MLX's own layouts of transformers' tensors (markbase reads both): channels-last audio conv kernels
    [O, kH, kW, I] for [O, I, kH, kW], depthwise [C, K, 1] for [C, 1, K]."""
    if len(want) == 4:
        return stored == (want[0], want[2], want[3], want[1])
    return len(want) == 3 and want[1] == 1 and stored == (want[0], want[2], 1)


# The affine widths MLX writes; markbase holds 1-3 bits as 4-bit nibbles and 5-6 as bytes (ops.widen_affine_bits).
MLX_WIDTHS = (1, 2, 3, 4, 5, 6, 8)


def _check_stored(name: str, fname: str, sf, want: tuple, present: dict, report: Report, mlx_name: bool = False,
                  declared=None) -> None:
    """Shape and dtype of one stored tensor of the table: as transformers saves it, or MLX-quantized
    (u32-packed values of 1-6 or 8 bits beside `<base>.scales` / `<base>.biases`, groups of 32 / 64 / 128)."""
    shape, dtype = tuple(sf.shape(name)), sf.dtype(name)
    base = _quant_base(name)
    if dtype == "U32" and base + ".scales" in present:
        if base + ".biases" not in present:
            report.dtype_mismatches.append(f"{name} in {fname}: quantized, but {base}.biases is missing (markbase reads "
                                           "MLX's affine mode: scales and biases per group)")
            return
        s_file, b_file = present[base + ".scales"][1], present[base + ".biases"][1]
        s_shape, b_shape = tuple(s_file.shape(base + ".scales")), tuple(b_file.shape(base + ".biases"))
        K, groups = want[-1], (s_shape[-1] if s_shape else 0)
        words = shape[-1] if shape else 0
        bits = words * 32 // K if K else 0
        ok = (len(want) >= 2 and shape[:-1] == want[:-1] and s_shape == b_shape and s_shape[:-1] == want[:-1]
              and groups > 0 and K % groups == 0 and words * 32 == bits * K and bits in MLX_WIDTHS and K // groups in (32, 64, 128))
        if not ok:
            report.shape_mismatches.append(
                f"{name} in {fname}: quantized as {list(shape)} U32 with scales {list(s_shape)} and biases {list(b_shape)}, "
                f"which is not a matrix {list(want)} of 1-6 or 8 bits in groups of 32, 64 or 128")
        else:
            # Width and group size are read from the shapes; shapes that fit other ones (a truncated or mislabelled
            # matrix) would otherwise load as those values.
            for key, got, how in (("bits", bits, f"its {words} words per row hold {K} values at {bits} bits"),
                                  ("group_size", K // groups, f"its {groups} scales per row make groups of {K // groups}")):
                if declared_value(declared, base, key) not in (None, got):
                    report.shape_mismatches.append(
                        f"{name} in {fname}: config.json's quantization gives {base} {key} "
                        f"{declared_value(declared, base, key)}, but {how}")
        for part, f in ((base + ".scales", s_file), (base + ".biases", b_file)):
            if f.dtype(part) not in FLOAT_DTYPES:
                report.dtype_mismatches.append(f"{part}: dtype {f.dtype(part)}, expected F32, BF16 or F16")
        return
    if shape != tuple(want) and not (mlx_name and _mlx_layout(shape, tuple(want))):
        report.shape_mismatches.append(f"{name} in {fname}: shape {list(shape)}, expected {list(want)}")
    if dtype not in FLOAT_DTYPES:
        report.dtype_mismatches.append(f"{name} in {fname}: dtype {dtype}, expected F32, BF16 or F16")


def require_valid(path: str | os.PathLike) -> Report:
    """Structural validation for `load`: raises CheckpointError listing every finding."""
    report = validate(path, scan_values=False)
    if report.config_error:
        raise ConfigError(report.config_error)
    if not report.structural_ok:
        lines = "\n".join(f"  - {f}" for f in report.findings())
        raise CheckpointError(f"checkpoint {report.path} is incomplete or does not match its config.json:\n{lines}\n"
                              f"(run `markbase validate {report.path}` for the full report)")
    return report
