"""Synthetic Gemma 4 checkpoints without torch: `make_checkpoint(dir, family=..., size=..., dtype=..., seed=...)`.

Writes a complete checkpoint directory (config.json in the published form, safetensors written
streaming — sharded with an index when large — tokenizer.json with every Gemma 4 special token at its
real id, tokenizer_config.json, chat_template.jinja, generation_config.json) from the weight table.
`size="real"` uses the released shapes (for benchmarks); `size="tiny"` a few-MB model of the same family.
Random weights: matrices N(0, 1/fan_in), norm weights around 1, q/k norms in [0.3, 0.6] (so the random
model is not chaotic), layer_scalar in [0.5, 1], clip bounds ±[2, 3], other scales in [0.5, 1.5].
"""

from __future__ import annotations

import copy
import json
import math
import os
import struct

import numpy as np

from .._core import InputError
from ..models.gemma4 import parse_config, weight_table
from .released import RELEASED
from .tokenizer_build import GENERATION_CONFIG, build_tokenizer_json, chat_template, tokenizer_config

FAMILIES = {"e2b": "gemma-4-E2B-it", "e4b": "gemma-4-E4B-it", "26b": "gemma-4-26B-A4B-it",
            "31b": "gemma-4-31B-it", "12b": "gemma-4-12B-it"}
_ST_DTYPES = {"f32": "F32", "bf16": "BF16", "f16": "F16"}


def _period(layer_types: list[str]) -> int:
    return layer_types.index("full_attention") + 1


def tiny_config(family: str) -> dict:
    """The released config of `family`, shrunk: hidden 64, 4 heads of 16 (32 on full layers), window 16."""
    cfg = copy.deepcopy(RELEASED[FAMILIES[family]])
    t = cfg["text_config"]
    period = _period(t["layer_types"])
    n = 2 * period
    kv = 1 if t["num_key_value_heads"] == 1 else 2
    t.update(hidden_size=64, intermediate_size=128, num_hidden_layers=n, num_attention_heads=4, num_key_value_heads=kv,
             head_dim=16, global_head_dim=32, sliding_window=16, max_position_embeddings=4096,
             layer_types=["full_attention" if i % period == period - 1 else "sliding_attention" for i in range(n)])
    if t.get("num_global_key_value_heads"):
        t["num_global_key_value_heads"] = 1
    if t.get("num_kv_shared_layers"):
        t["num_kv_shared_layers"] = period  # the second pattern block reuses the first one's caches
    if t.get("hidden_size_per_layer_input"):
        t["hidden_size_per_layer_input"] = 8
    if t.get("enable_moe_block"):
        t.update(num_experts=8, top_k_experts=2, moe_intermediate_size=32, intermediate_size=48)
    v = cfg.get("vision_config")
    if v and family != "12b":
        v.update(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                 head_dim=16, position_embedding_size=1536)  # room for any budget and aspect ratio
    elif v:
        v.update(mm_embed_dim=64, mm_posemb_size=64, output_proj_dims=64)
    a = cfg.get("audio_config")
    if a and family != "12b":
        a.update(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, subsampling_conv_channels=[128, 4],
                 output_proj_dims=48)
    return cfg


def _round_bf16(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even bf16 bits, by the engine's own (tested) converter."""
    from .._core import Tensor

    return Tensor(np.ascontiguousarray(x, dtype=np.float32), dtype="bf16").numpy()


def _encode(x: np.ndarray, dtype: str) -> bytes:
    if dtype == "bf16":
        return _round_bf16(x).tobytes()
    if dtype == "f16":
        return x.astype(np.float16).tobytes()
    return x.astype(np.float32).tobytes()


def _values(name: str, shape: tuple[int, ...], rng: np.random.Generator, rows: slice | None = None,
            live_ids: np.ndarray | None = None) -> np.ndarray:
    """Random values for one tensor (or a slice of its rows), by what the tensor is.

    Token-embedding rows of ids the tokenizer does not use are zero: the tied LM head then gives them
    logit 0, so top-k sampling from the random model picks real, printable tokens.
    """
    leaf = name.rsplit(".", 1)[-1]
    sub = shape if rows is None else (rows.stop - rows.start, *shape[1:])
    if name.endswith("layer_scalar"):
        return rng.uniform(0.5, 1.0, sub).astype(np.float32)
    if leaf in ("input_min", "output_min"):
        return -rng.uniform(2.0, 3.0, sub).astype(np.float32)
    if leaf in ("input_max", "output_max"):
        return rng.uniform(2.0, 3.0, sub).astype(np.float32)
    if "q_norm" in name or "k_norm" in name:
        return rng.uniform(0.3, 0.6, sub).astype(np.float32)
    if leaf in ("scale", "per_expert_scale", "std_scale", "per_dim_scale"):
        return rng.uniform(0.5, 1.5, sub).astype(np.float32)
    if len(shape) <= 1:
        base = 0.0 if (leaf == "bias" or name.endswith("std_bias")) else 1.0
        return (base + 0.1 * rng.standard_normal(sub)).astype(np.float32)
    fan_in = int(np.prod(shape[1:])) if "embed_tokens" not in name else shape[1]
    out = rng.standard_normal(sub, dtype=np.float32) * np.float32(1.0 / math.sqrt(max(fan_in, 1)))
    if name.endswith("language_model.embed_tokens.weight") and live_ids is not None:
        start = 0 if rows is None else rows.start
        keep = np.zeros(sub[0], bool)
        sel = live_ids[(live_ids >= start) & (live_ids < start + sub[0])] - start
        keep[sel] = True
        out[~keep] = 0.0
    return out


def _dense_tensor(name: str, shape: tuple[int, ...], dtype: str, seed: int, live_ids: np.ndarray | None):
    """The OutTensor of one random tensor, generated and written a few MB of rows at a time."""
    from ..mlx_format import OutTensor

    def write(f) -> None:
        rng = np.random.default_rng([seed, *name.encode()])  # a seed per name: the same whatever the sharding
        if len(shape) >= 2:
            row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * (4 if dtype == "f32" else 2)
            step = max(1, (32 << 20) // max(row_bytes, 1))
            for r in range(0, shape[0], step):
                f.write(_encode(_values(name, shape, rng, slice(r, min(shape[0], r + step)), live_ids), dtype))
        else:
            f.write(_encode(_values(name, shape, rng), dtype))

    return OutTensor(name, _ST_DTYPES[dtype], tuple(shape), write)


def _quantized_tensors(spec, stored: str, dtype: str, bits: int, seed: int, live_ids: np.ndarray | None):
    """A matrix of the table written directly in MLX's quantized format under its MLX name(s) (the
    experts split as mlx-vlm stores them). Random packed values drawn directly (uniform q, so w = s·q + b
    is uniform on ±sqrt(3 / fan_in): variance 1 / fan_in like the dense matrices), a block of rows at a
    time: a real-size 26B-A4B is written in minutes. Embedding rows of unused ids are zero (s = b = 0)."""
    from ..mlx_format import ROW_BLOCK_BYTES, OutTensor, mlx_name, mlx_pieces

    K, group = spec.shape[-1], 64
    piece_bits = 8 if spec.quant == "table" else bits
    st = _ST_DTYPES[dtype]
    out = []
    for piece, shape, _ in mlx_pieces(mlx_name(spec.name), tuple(spec.shape)):
        rows = int(np.prod(shape[:-1], dtype=np.int64))
        G = K // group
        a = math.sqrt(3.0 / K)
        scale = np.full((rows, G), 2 * a / ((1 << piece_bits) - 1), np.float32)
        bias = np.full((rows, G), -a, np.float32)
        if "embed_tokens" in piece and live_ids is not None:
            dead = np.ones(rows, bool)
            dead[live_ids[live_ids < rows]] = False
            scale[dead] = 0.0
            bias[dead] = 0.0
        base = piece[: -len(".weight")]

        def write_q(f, piece=piece, rows=rows):
            rng = np.random.default_rng([seed, *piece.encode()])
            row_bytes = K * piece_bits // 8
            step = max(1, ROW_BLOCK_BYTES // row_bytes)
            for r in range(0, rows, step):
                f.write(rng.integers(0, 256, (min(rows, r + step) - r) * row_bytes, dtype=np.uint8).tobytes())

        gshape = (*shape[:-1], G)
        out += [OutTensor(piece, "U32", (*shape[:-1], K * piece_bits // 32), write_q),
                OutTensor(base + ".scales", st, gshape, lambda f, v=scale: f.write(_encode(v, dtype))),
                OutTensor(base + ".biases", st, gshape, lambda f, v=bias: f.write(_encode(v, dtype)))]
    return out


def make_checkpoint(directory: str | os.PathLike, family: str = "e2b", size: str = "tiny", dtype: str = "bf16",
                    seed: int = 0, shard_bytes: int = 2 << 30, text_only: bool = False, bits: int | None = None) -> str:
    """Writes a synthetic Gemma 4 checkpoint directory and returns its path.

    family: e2b, e4b, 26b, 31b or 12b; size: "tiny", "real" (released shapes) or "encoders" (a tiny text
    model with the released vision / audio encoders: encoder benchmarks); dtype: bf16, f32 or f16;
    text_only: leave out the vision / audio parts (a text-only benchmark checkpoint).
    bits: 4 or 8 writes the checkpoint directly in MLX's quantized format (as `markbase quantize` would
    write it: decoder matrices to `bits`, the tied embedding to 8, groups of 64) without ever holding it
    unquantized: the 26B-A4B at real size fits this way.
    """
    if family not in FAMILIES:
        raise InputError(f"make_checkpoint: family must be one of {', '.join(FAMILIES)}, got {family!r}")
    if size not in ("tiny", "real", "encoders"):
        raise InputError(f"make_checkpoint: size must be 'tiny', 'real' or 'encoders', got {size!r}")
    if dtype not in _ST_DTYPES:
        raise InputError(f"make_checkpoint: dtype must be bf16, f32 or f16, got {dtype!r}")
    if bits not in (None, 4, 8):
        raise InputError(f"make_checkpoint: bits must be None, 4 or 8, got {bits!r}")
    d = os.fspath(directory)
    os.makedirs(d, exist_ok=True)
    cfg = copy.deepcopy(RELEASED[FAMILIES[family]]) if size == "real" else tiny_config(family)
    if size == "encoders":
        released = RELEASED[FAMILIES[family]]
        cfg["vision_config"] = copy.deepcopy(released.get("vision_config"))
        cfg["audio_config"] = copy.deepcopy(released.get("audio_config"))
    unified = cfg["model_type"] == "gemma4_unified"
    if text_only:
        cfg["vision_config"] = None
        cfg["audio_config"] = None
    cfg["architectures"] = ["Gemma4UnifiedForConditionalGeneration" if unified else "Gemma4ForConditionalGeneration"]
    cfg["eos_token_id"] = [1, 106]
    cfg["dtype"] = {"bf16": "bfloat16", "f32": "float32", "f16": "float16"}[dtype]
    cfg["text_config"]["model_type"] = "gemma4_unified_text" if unified else "gemma4_text"
    parsed = parse_config(cfg, "make_checkpoint")
    # On-disk names: the unified 12B checkpoint stores its vision embedder under the published aliases.
    specs = [s for s in weight_table(parsed) if s.required]
    stored = {s.name: (s.aliases[0] if unified and s.aliases and not s.name.startswith("model.language_model.") else s.name)
              for s in specs}
    if bits:
        from ..mlx_format import quantization_config

        cfg["quantization"] = cfg["quantization_config"] = quantization_config(
            bits, 64, {} if bits == 8 else {"language_model.model.embed_tokens": 8})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tokenizer_json = build_tokenizer_json()
    live = [i for t, i in json.loads(tokenizer_json)["model"]["vocab"].items() if not (t.startswith("<") and t.endswith(">"))]
    live_ids = np.array(sorted(live), dtype=np.int64)
    out = []
    for s in specs:
        if bits and s.component == "text" and s.linear and s.quant in ("matrix", "table") and s.shape[-1] % 64 == 0:
            out += _quantized_tensors(s, stored[s.name], dtype, bits, seed, live_ids)
        else:
            from ..mlx_format import mlx_name, mlx_pieces

            name = mlx_name(s.name) if bits else stored[s.name]
            if bits and s.linear and len(s.shape) == 3:  # experts kept dense, still under MLX's names
                for piece, shape, _ in mlx_pieces(name, tuple(s.shape)):
                    out.append(_dense_tensor(piece, shape, dtype, seed, live_ids))
            else:
                out.append(_dense_tensor(name, tuple(s.shape), dtype, seed, live_ids))
    meta = {"format": "mlx" if bits else "pt", "generator": "markbase.testing.make_checkpoint", "family": family,
            "size": size}
    from ..mlx_format import write_checkpoint

    write_checkpoint(d, out, shard_bytes, meta)

    template = chat_template(empty_thought=family in ("26b", "31b", "12b"))
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tokenizer_json)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(), f, indent=2)
    with open(os.path.join(d, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(template)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump(GENERATION_CONFIG, f, indent=2)
    return d
