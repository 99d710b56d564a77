"""What a model needs in memory, computed before anything is allocated (issue 14, memory bounds).

The plan counts: the text weights read every step (memory-mapped from the checkpoint: they must fit in
RAM to decode at memory speed; the PLE table is a gather and is not counted), weights quantized at load
(anonymous memory), one session's KV cache at max_context (f32 keys and values of every layer that owns a
cache: full layers grow with the context, sliding layers keep a ring of window − 1 + one prefill chunk) and
its activation arena. `load` refuses a max_context whose plan exceeds the memory available, with the
numbers, and without max_context picks the longest that fits. Available memory: MemAvailable, bounded by
the cgroup limit of a container, or MARKBASE_MEMORY_LIMIT (bytes) when set.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

KV_DTYPE_BYTES = 4          # caches hold f32 keys and values
KV_SLOT_EXTRA_BYTES = 8     # per cached token: its position and bidirectional block id (i32 each)
ARENA_ALLOWANCE = 64 << 20  # activations of one prefill chunk, before the measured figure is known


@dataclass
class MemoryPlan:
    available_bytes: int | None   # None: unknown (no limit applied)
    weights_mapped_bytes: int     # text weights read every step, mapped from the checkpoint
    weights_resident_bytes: int   # weights quantized at load (anonymous memory)
    kv_bytes_per_token: int       # full-attention layers, per token of context
    kv_ring_slot_bytes: int       # sliding-window layers, per slot of their rings
    kv_ring_slots: int            # a ring's slots: window − 1 + one prefill chunk (or the context, if shorter)
    arena_bytes: int              # one session's activations (an allowance before load)
    max_context: int

    def kv_bytes_at(self, context: int) -> int:
        """One session's KV cache when it holds `context` tokens (what runtime/kv_cache allocates)."""
        return self.kv_bytes_per_token * context + self.kv_ring_slot_bytes * min(context, self.kv_ring_slots)

    @property
    def kv_cache_bytes(self) -> int:
        return self.kv_bytes_at(self.max_context)

    @property
    def total_bytes(self) -> int:
        return self.weights_mapped_bytes + self.weights_resident_bytes + self.kv_cache_bytes + self.arena_bytes

    def as_dict(self) -> dict:
        return dict(asdict(self), kv_cache_bytes=self.kv_cache_bytes, total_bytes=self.total_bytes)

    def describe(self) -> str:
        gb = lambda n: f"{n / 1e9:.2f} GB"  # noqa: E731
        parts = [f"text weights {gb(self.weights_mapped_bytes)} (mapped)"]
        if self.weights_resident_bytes:
            parts.append(f"quantized weights {gb(self.weights_resident_bytes)}")
        parts += [f"KV cache {gb(self.kv_cache_bytes)} at max_context {self.max_context} "
                  f"({self.kv_bytes_per_token} bytes per token)", f"activations {gb(self.arena_bytes)}"]
        return f"{gb(self.total_bytes)} = " + " + ".join(parts)


def available_memory() -> int | None:
    env = os.environ.get("MARKBASE_MEMORY_LIMIT")
    if env:
        try:
            return int(float(env))
        except ValueError:
            from ._core import ConfigError

            raise ConfigError(f"MARKBASE_MEMORY_LIMIT must be a number of bytes, got {env!r}") from None
    found = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    try:  # a container's limit (cgroup v2), less what it already uses
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit != "max":
            with open("/sys/fs/cgroup/memory.current") as f:
                found.append(int(limit) - int(f.read().strip()))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def kv_sizes(text_config, prefill_chunk: int) -> tuple[int, int, int]:
    """(bytes per token over the full-attention caches, bytes per ring slot over the sliding layers, slots
    of a ring). A sliding layer keeps window − 1 + one chunk slots, or every token when the context is
    shorter than that (runtime/kv_cache.cpp)."""
    per_token, ring_slot = 0, 0
    for layer in text_config.layers:
        if layer.kv_mode == "reuse":
            continue
        slot = 2 * layer.num_key_value_heads * layer.head_dim * KV_DTYPE_BYTES + KV_SLOT_EXTRA_BYTES
        if layer.is_sliding:
            ring_slot += slot
        else:
            per_token += slot
    return per_token, ring_slot, text_config.sliding_window - 1 + prefill_chunk


def text_weight_bytes(path: str, config=None) -> int:
    """Bytes of text weights a decode step reads (as held: MLX's 1-3 / 5-6 bit matrices widened): every text
    tensor but the PLE table (a gather of one row per token, mapped at its stored width), the tied embedding
    counted once (as the LM head)."""
    from .io import open_checkpoint
    from .mlx_format import mlx_name
    from .models.gemma4 import load_config
    from .models.gemma4.weights import text_prefix

    ckpt = open_checkpoint(path)
    prefix = text_prefix(config if config is not None else load_config(path))
    prefixes = (prefix, mlx_name(prefix + "x")[:-1])  # transformers' names, or mlx-vlm's ("language_model.model.")
    widths = _mlx_widths(path)
    read = 0
    for name in ckpt.keys():
        if name.startswith(prefixes) and "embed_tokens_per_layer" not in name:
            lo, hi = ckpt.offsets(name)
            read += int((hi - lo) * widths(name, ckpt))
    return read


def _mlx_widths(path: str):
    """(name, ckpt) -> the factor from stored to held bytes of a tensor: MLX's 1-3 and 5-6 bit matrices are held
    as 4-bit nibbles / bytes (ops.widen_affine_bits), their bits as config.json declares them (which validate
    holds to the shapes); 1 for everything else."""
    from .mlx_format import declared_value, read_quantization

    block = read_quantization(path)

    def factor(name, ckpt):
        base = name[: -len(".weight")] if name.endswith(".weight") else name
        if ckpt.dtype(name) != "U32" or base + ".scales" not in ckpt:
            return 1
        bits = declared_value(block, base, "bits")
        if bits is None or bits < 1 or bits in (4, 8):
            return 1
        return (4 if bits <= 4 else 8) / bits

    return factor


def plan_for(path: str, config, prefill_chunk: int, quantize_bits: int, max_context: int,
             arena_bytes: int = ARENA_ALLOWANCE) -> MemoryPlan:
    mapped = text_weight_bytes(path, config)
    resident = 0
    if quantize_bits:  # the quantized copy replaces the mapped matrices: about bits/16 of their bf16 bytes
        resident = int(mapped * (quantize_bits + 1) / 16)
        mapped = 0
    per_token, ring_slot, ring_slots = kv_sizes(config.text_config, prefill_chunk)
    return MemoryPlan(available_memory(), mapped, resident, per_token, ring_slot, ring_slots, arena_bytes, max_context)


def choose_max_context(plan: MemoryPlan, limit: int, given: int | None) -> int:
    """The max_context to load with: `given` if its plan fits (ConfigError with the numbers if not), else
    the longest up to `limit` that fits."""
    from ._core import ConfigError

    avail = plan.available_bytes
    if given is not None:
        plan.max_context = given
        if avail is not None and plan.total_bytes > avail:
            raise ConfigError(f"load: the model needs {plan.describe()}, but {avail / 1e9:.2f} GB is available; "
                              f"lower max_context (or quantize=...)")
        return given
    plan.max_context = limit
    if avail is None or plan.total_bytes <= avail:
        return limit
    plan.max_context = 1
    if plan.total_bytes > avail:
        raise ConfigError(f"load: even a 1-token context does not fit: the model needs {plan.describe()}, but "
                          f"{avail / 1e9:.2f} GB is available")
    lo, hi = 1, limit  # the plan grows with the context: the longest that fits, by bisection
    while lo < hi:
        plan.max_context = (lo + hi + 1) // 2
        lo, hi = (plan.max_context, hi) if plan.total_bytes <= avail else (lo, plan.max_context - 1)
    plan.max_context = lo
    return lo
