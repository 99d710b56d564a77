"""What a model needs in memory, computed before anything is allocated (issue 14, memory bounds).

The plan counts: the text weights read every step (memory-mapped from the checkpoint: they must fit in
RAM to decode at memory speed; the PLE table is a gather and is not counted), weights quantized at load
(anonymous memory), one session's KV cache at max_context (f32 keys and values of every layer that owns a
cache: full layers grow with the context, sliding layers keep a ring of window − 1 + one prefill chunk) and
its activation arena. `load` refuses a max_context whose plan exceeds the memory available, with the
numbers, and without max_context picks the longest that fits. Available memory: MemAvailable, bounded by
the cgroup limit of a container, or MARKBASE_MEMORY_LIMIT (bytes) when set.

Several sessions (generate_batch, a server's batch and prompt cache): `check_sessions` adds up what each
session allocates (its KV cache at its context, its measured activation arena, its logits buffer, its
sampler's penalty tables) and what a batched decode step of their rows adds, and refuses with the numbers
what does not fit beside the model in the memory that was available at load.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass

KV_DTYPE_BYTES = 4          # caches hold f32 keys and values
KV_SLOT_EXTRA_BYTES = 8     # per cached token: its position and bidirectional block id (i32 each)
ARENA_ALLOWANCE = 64 << 20  # activations of one prefill chunk, before the measured figure is known
LOGITS_BYTES = 4            # per vocabulary entry: f32 logits (a session's buffer, a batched step's rows)
PENALTY_TABLE_BYTES = 5     # per vocabulary entry, a sampler with penalties: counts (i32) and prompt flags (u8)
DRAW_SCRATCH_BYTES = 16     # per vocabulary entry, the sampling thread's scratch: logits f32, order i32, probs f64


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


@dataclass
class SessionsNeed:
    """What a set of sessions allocates beside the model (runtime/session.cpp, runtime/kv_cache.cpp,
    runtime/sampler.cpp), each figure summed over the sessions."""
    what: str                 # who asks, for messages ("generate_batch of 300 prompts")
    sessions: int
    max_context: int          # the longest session's context
    kv_bytes: int             # KV caches, each full at its context
    arena_bytes: int          # activation arenas (measured by the core for each context)
    logits_bytes: int         # each session's last-logits buffer
    sampler_bytes: int        # samplers' penalty tables (none without penalties)
    batch_rows: int           # rows of a batched decode step (0: the sessions do not decode together)
    batch_bytes: int          # that step's arena and logits rows, and the sampling scratch
    growth_bytes: int         # a full cache doubling holds its old and new buffers at once: one session's

    @property
    def total_bytes(self) -> int:
        return (self.kv_bytes + self.arena_bytes + self.logits_bytes + self.sampler_bytes + self.batch_bytes
                + self.growth_bytes)

    def as_dict(self) -> dict:
        return dict(asdict(self), total_bytes=self.total_bytes)

    def describe(self) -> str:
        mb = lambda n: f"{n / 1e6:.1f} MB"  # noqa: E731
        parts = [f"KV caches {mb(self.kv_bytes)}", f"activations {mb(self.arena_bytes)}",
                 f"logits {mb(self.logits_bytes)}"]
        if self.sampler_bytes:
            parts.append(f"sampler tables {mb(self.sampler_bytes)}")
        if self.batch_rows:
            parts.append(f"a batched step of {self.batch_rows} rows {mb(self.batch_bytes)}")
        parts.append(f"cache growth {mb(self.growth_bytes)}")
        return (f"{self.sessions} session(s) of up to {self.max_context} tokens need {mb(self.total_bytes)} = "
                + " + ".join(parts))


def sessions_need(plan: MemoryPlan, core, contexts: Mapping[int, int], what: str, batch_rows: int = 0,
                  penalties: bool = False) -> SessionsNeed:
    """What sessions allocate: contexts maps a context length to the number of sessions of that length;
    `batch_rows` of them decode together; penalties: the samplers of the sequences generating (the batch's
    rows, or every session without a batch) keep per-token tables. `core`: the loaded model (its measured
    arenas)."""
    vocab = core.config.text_config.vocab_size
    sessions = sum(contexts.values())
    longest = max(contexts)
    generating = batch_rows or sessions
    batch = 0
    if batch_rows:
        batch = (core.batch_arena_bytes(batch_rows) + LOGITS_BYTES * vocab * batch_rows
                 + DRAW_SCRATCH_BYTES * vocab)
    return SessionsNeed(
        what=what, sessions=sessions, max_context=longest,
        kv_bytes=sum(plan.kv_bytes_at(c) * k for c, k in contexts.items()),
        arena_bytes=sum(core.session_arena_bytes(c) * k for c, k in contexts.items()),
        logits_bytes=LOGITS_BYTES * vocab * sessions,
        sampler_bytes=PENALTY_TABLE_BYTES * vocab * generating if penalties else 0,
        batch_rows=batch_rows, batch_bytes=batch, growth_bytes=plan.kv_bytes_at(longest))


def model_bytes(plan: MemoryPlan) -> int:
    """The model's own share of memory whatever its sessions: weights, and the load plan's activation
    allowance (it also covers the kernels' per-thread scratch, which sessions share)."""
    return plan.weights_mapped_bytes + plan.weights_resident_bytes + plan.arena_bytes


def check_sessions(plan: MemoryPlan, core, contexts: Mapping[int, int], what: str, batch_rows: int = 0,
                   penalties: bool = False, error: type | None = None) -> SessionsNeed:
    """sessions_need, refused with the numbers (`error`, ConfigError by default) when it does not fit beside
    the model in the memory available at load (MARKBASE_MEMORY_LIMIT, MemAvailable or the cgroup's)."""
    from ._core import ConfigError

    need = sessions_need(plan, core, contexts, what, batch_rows, penalties)
    avail = plan.available_bytes
    if avail is not None and model_bytes(plan) + need.total_bytes > avail:
        raise (error or ConfigError)(
            f"{what}: does not fit in memory: {need.describe()}, beside the model's "
            f"{model_bytes(plan) / 1e6:.1f} MB, but {avail / 1e6:.1f} MB is available; use fewer sessions or "
            f"shorter contexts")
    return need
