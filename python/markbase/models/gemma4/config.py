"""Parses a Gemma 4 `config.json` (model_type gemma4, gemma4_unified, or a text-only gemma4_text).

Both forms found in the wild are accepted: the published one (`global_head_dim`,
`num_global_key_value_heads`) and the one transformers 5.23 writes (`per_layer_config`, keyed by layer
index). Defaults are transformers' class defaults. Every inconsistency is a ConfigError naming the field.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from ..._core import ConfigError

SLIDING = "sliding_attention"
FULL = "full_attention"

# transformers 5.23 class defaults (Gemma4TextConfig; Gemma4UnifiedTextConfig differs where noted).
_TEXT_DEFAULTS: dict[str, Any] = dict(
    vocab_size=262_144, hidden_size=2304, intermediate_size=9216, num_hidden_layers=30, num_attention_heads=8,
    num_key_value_heads=4, head_dim=256, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=131_072,
    rms_norm_eps=1e-6, pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
    rope_parameters=None, attention_bias=False, sliding_window=512, layer_types=None,
    final_logit_softcapping=None, use_bidirectional_attention=None, vocab_size_per_layer_input=262_144,
    hidden_size_per_layer_input=256, attention_k_eq_v=False, num_kv_shared_layers=0, enable_moe_block=False,
    use_double_wide_mlp=False, num_experts=None, top_k_experts=None, moe_intermediate_size=None,
)
_UNIFIED_TEXT_DEFAULTS = dict(_TEXT_DEFAULTS, max_position_embeddings=262_144, sliding_window=1024,
                              use_bidirectional_attention="vision", hidden_size_per_layer_input=0,
                              enable_moe_block=False)
_DEFAULT_ROPE = {
    SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
    FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
}


@dataclass(frozen=True)
class RopeSpec:
    kind: str             # "default" | "proportional"
    theta: float
    partial_rotary_factor: float


@dataclass(frozen=True)
class LayerSpec:
    index: int
    type: str             # SLIDING | FULL
    head_dim: int
    num_kv_heads: int
    kv_mode: str | None   # None (own cache) | "store" (own cache, published) | "reuse" (reads kv_source's cache)
    kv_source: int        # layer whose K/V this layer attends to (itself unless "reuse")
    intermediate_size: int
    has_v_proj: bool      # False on full layers of attention_k_eq_v models: V = v_norm(raw k)
    rope: RopeSpec

    @property
    def is_sliding(self) -> bool:
        return self.type == SLIDING


@dataclass(frozen=True)
class TextConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float
    sliding_window: int
    final_logit_softcapping: float | None
    use_bidirectional_attention: str | None
    vocab_size_per_layer_input: int
    hidden_size_per_layer_input: int   # PLE width P (0 = no PLE)
    attention_k_eq_v: bool
    num_kv_shared_layers: int
    enable_moe_block: bool
    use_double_wide_mlp: bool
    num_experts: int
    top_k_experts: int
    moe_intermediate_size: int
    tie_word_embeddings: bool
    pad_token_id: int
    bos_token_id: int
    eos_token_ids: tuple[int, ...]
    layer_types: tuple[str, ...]
    layers: tuple[LayerSpec, ...]

    @property
    def has_ple(self) -> bool:
        return self.hidden_size_per_layer_input > 0

    @property
    def first_kv_shared_layer(self) -> int:
        return self.num_hidden_layers - self.num_kv_shared_layers


@dataclass(frozen=True)
class Gemma4Config:
    model_type: str                      # "gemma4" | "gemma4_unified" | "gemma4_text"
    text: TextConfig
    vision: dict[str, Any] | None        # raw vision_config (parsed by the vision issue)
    audio: dict[str, Any] | None         # raw audio_config
    eos_token_ids: tuple[int, ...]
    special_token_ids: dict[str, int] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def is_unified(self) -> bool:
        return self.model_type == "gemma4_unified"

    @property
    def family(self) -> str:
        """A human-readable family guess: E2B-like, E4B-like, 26B-A4B-like, 31B-like, 12B-like."""
        t = self.text
        if self.is_unified:
            return "gemma-4-12B (unified)"
        if t.enable_moe_block:
            return "gemma-4-26B-A4B (MoE)"
        if t.has_ple:
            return "gemma-4-E2B" if t.use_double_wide_mlp else "gemma-4-E4B"
        return "gemma-4-31B (dense)"


def _fail(field_name: str, msg: str, where: str) -> ConfigError:
    return ConfigError(f"{where}: field '{field_name}' {msg}")


def _int(d: dict, key: str, where: str, minimum: int = 0, allow_none: bool = False) -> int | None:
    v = d.get(key)
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _fail(key, f"must be an integer, got {v!r}", where)
    if v < minimum:
        raise _fail(key, f"must be >= {minimum}, got {v}", where)
    return v


def _float(d: dict, key: str, where: str, allow_none: bool = False) -> float | None:
    v = d.get(key)
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise _fail(key, f"must be a finite number, got {v!r}", where)
    return float(v)


def _bool(d: dict, key: str, where: str) -> bool:
    v = d.get(key)
    if not isinstance(v, bool):
        raise _fail(key, f"must be true or false, got {v!r}", where)
    return v


def _ids(v: Any, key: str, where: str) -> tuple[int, ...]:
    if v is None:
        return ()
    if isinstance(v, int) and not isinstance(v, bool):
        return (v,)
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return tuple(v)
    raise _fail(key, f"must be an integer or a list of integers, got {v!r}", where)


def _rope(params: dict, layer_type: str, where: str) -> RopeSpec:
    p = params.get(layer_type)
    if not isinstance(p, dict):
        raise _fail("rope_parameters", f"has no entry for '{layer_type}'", where)
    kind = p.get("rope_type", "default")
    if kind not in ("default", "proportional"):
        raise _fail(f"rope_parameters.{layer_type}.rope_type", f"'{kind}' is not supported (default, proportional)", where)
    theta = _float(p, "rope_theta", f"{where} rope_parameters.{layer_type}")
    factor = p.get("partial_rotary_factor", 1.0)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise _fail(f"rope_parameters.{layer_type}.partial_rotary_factor", f"must be in (0, 1], got {factor!r}", where)
    if theta <= 0:
        raise _fail(f"rope_parameters.{layer_type}.rope_theta", f"must be > 0, got {theta}", where)
    return RopeSpec(kind, theta, float(factor))


def parse_text_config(tc: dict[str, Any], unified: bool, where: str) -> TextConfig:
    if not isinstance(tc, dict):
        raise ConfigError(f"{where}: text_config must be an object")
    d = dict(_UNIFIED_TEXT_DEFAULTS if unified else _TEXT_DEFAULTS)
    d.update({k: v for k, v in tc.items()})
    w = f"{where} text_config"

    n_layers = _int(d, "num_hidden_layers", w, 1)
    hidden = _int(d, "hidden_size", w, 1)
    n_heads = _int(d, "num_attention_heads", w, 1)
    n_kv = _int(d, "num_key_value_heads", w, 1)
    head_dim = _int(d, "head_dim", w, 1)
    inter = _int(d, "intermediate_size", w, 1)
    vocab = _int(d, "vocab_size", w, 1)
    window = _int(d, "sliding_window", w, 1)
    act = d.get("hidden_activation")
    if act not in ("gelu_pytorch_tanh", "gelu_tanh"):
        raise _fail("hidden_activation", f"'{act}' is not supported (gelu_pytorch_tanh)", w)
    if d.get("attention_bias"):
        raise _fail("attention_bias", "true is not supported (Gemma 4 attention has no bias)", w)
    if n_heads % n_kv:
        raise _fail("num_key_value_heads", f"{n_kv} does not divide num_attention_heads {n_heads}", w)

    bidir = d.get("use_bidirectional_attention")
    if bidir not in (None, "vision", "all"):
        raise _fail("use_bidirectional_attention", f"must be null, 'vision' or 'all', got {bidir!r}", w)
    if bidir == "all":
        window = window // 2 + 1  # transformers halves the window for fully bidirectional models

    layer_types = d.get("layer_types")
    if layer_types is None:
        layer_types = [SLIDING if (i + 1) % 6 else FULL for i in range(n_layers)]
    if not isinstance(layer_types, list) or len(layer_types) != n_layers:
        raise _fail("layer_types", f"must list {n_layers} layer types (num_hidden_layers)", w)
    for i, t in enumerate(layer_types):
        if t not in (SLIDING, FULL):
            raise _fail(f"layer_types[{i}]", f"'{t}' is not sliding_attention or full_attention", w)
    layer_types = list(layer_types)
    layer_types[-1] = FULL  # transformers forces the last layer to full attention

    rope_params = d.get("rope_parameters") or _DEFAULT_ROPE
    if not isinstance(rope_params, dict):
        raise _fail("rope_parameters", "must be an object keyed by layer type", w)

    k_eq_v = _bool(d, "attention_k_eq_v", w)
    # Per-layer overrides: transformers' own form (per_layer_config) or the published one.
    overrides: dict[int, dict[str, Any]] = {}
    if "per_layer_config" in d and d["per_layer_config"] is not None:
        plc = d["per_layer_config"]
        if not isinstance(plc, dict):
            raise _fail("per_layer_config", "must be an object keyed by layer index", w)
        for key, val in plc.items():
            try:
                idx = int(key)
            except (TypeError, ValueError):
                raise _fail("per_layer_config", f"has a key {key!r} that is not a layer index", w) from None
            if not 0 <= idx < n_layers or not isinstance(val, dict):
                raise _fail(f"per_layer_config.{key}", f"must be an object for a layer in [0, {n_layers})", w)
            unknown = set(val) - {"head_dim", "num_key_value_heads"}
            if unknown:
                raise _fail(f"per_layer_config.{key}", f"has unsupported overrides {sorted(unknown)}", w)
            overrides[idx] = val
    else:
        global_head_dim = d.get("global_head_dim", 512)
        if isinstance(global_head_dim, bool) or not isinstance(global_head_dim, int) or global_head_dim < 1:
            raise _fail("global_head_dim", f"must be a positive integer, got {global_head_dim!r}", w)
        n_global_kv = d.get("num_global_key_value_heads")
        if n_global_kv is not None and (isinstance(n_global_kv, bool) or not isinstance(n_global_kv, int) or n_global_kv < 1):
            raise _fail("num_global_key_value_heads", f"must be a positive integer or null, got {n_global_kv!r}", w)
        ov: dict[str, Any] = {"head_dim": global_head_dim}
        if k_eq_v and n_global_kv is not None:
            ov["num_key_value_heads"] = n_global_kv
        overrides = {i: ov for i, t in enumerate(layer_types) if t == FULL}

    n_shared = _int(d, "num_kv_shared_layers", w, 0)
    if n_shared >= n_layers:
        raise _fail("num_kv_shared_layers", f"{n_shared} must be smaller than num_hidden_layers {n_layers}", w)
    first_shared = n_layers - n_shared
    modes: list[str | None] = [None if i < first_shared else "reuse" for i in range(n_layers)]
    store_of: dict[str, int] = {}
    if n_shared:
        for t in set(layer_types):
            producers = [i for i in range(first_shared) if layer_types[i] == t]
            if not producers:
                raise _fail("num_kv_shared_layers", f"leaves no non-shared '{t}' layer to produce the shared cache", w)
            store_of[t] = producers[-1]
            modes[producers[-1]] = "store"
    double_wide = _bool(d, "use_double_wide_mlp", w)

    moe = bool(d.get("enable_moe_block")) and not unified
    n_experts = top_k = moe_inter = 0
    if moe:
        n_experts = _int(d, "num_experts", w, 1)
        top_k = _int(d, "top_k_experts", w, 1)
        moe_inter = _int(d, "moe_intermediate_size", w, 1)
        if top_k > n_experts:
            raise _fail("top_k_experts", f"{top_k} exceeds num_experts {n_experts}", w)

    ple = 0 if unified else _int(d, "hidden_size_per_layer_input", w, 0, allow_none=True) or 0
    vocab_ple = _int(d, "vocab_size_per_layer_input", w, 1) if ple else 0

    layers = []
    for i, t in enumerate(layer_types):
        ov = overrides.get(i, {})
        hd = ov.get("head_dim", head_dim)
        kv = ov.get("num_key_value_heads", n_kv)
        for name, v in (("head_dim", hd), ("num_key_value_heads", kv)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise _fail(f"per_layer_config.{i}.{name}", f"must be a positive integer, got {v!r}", w)
        if n_heads % kv:
            raise _fail(f"per_layer_config.{i}.num_key_value_heads", f"{kv} does not divide num_attention_heads {n_heads}", w)
        mode = modes[i]
        layers.append(LayerSpec(
            index=i, type=t, head_dim=hd, num_kv_heads=kv, kv_mode=mode,
            kv_source=store_of[t] if mode == "reuse" else i,
            intermediate_size=inter * (2 if (double_wide and mode == "reuse") else 1),
            has_v_proj=not (k_eq_v and t == FULL),
            rope=_rope(rope_params, t, w),
        ))
    # A reuse layer attends to its producer's cache, so their shapes must agree.
    for L in layers:
        if L.kv_mode == "reuse":
            src = layers[L.kv_source]
            if (src.head_dim, src.num_kv_heads) != (L.head_dim, L.num_kv_heads):
                raise _fail("per_layer_config", f"layer {L.index} reuses layer {src.index}'s cache but their head_dim/num_key_value_heads differ", w)

    softcap = _float(d, "final_logit_softcapping", w, allow_none=True)
    if softcap is not None and softcap <= 0:
        raise _fail("final_logit_softcapping", f"must be > 0 or null, got {softcap}", w)
    return TextConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=n_layers,
        num_attention_heads=n_heads, num_key_value_heads=n_kv, head_dim=head_dim,
        max_position_embeddings=_int(d, "max_position_embeddings", w, 1), rms_norm_eps=_float(d, "rms_norm_eps", w),
        sliding_window=window, final_logit_softcapping=softcap, use_bidirectional_attention=bidir,
        vocab_size_per_layer_input=vocab_ple, hidden_size_per_layer_input=ple, attention_k_eq_v=k_eq_v,
        num_kv_shared_layers=n_shared, enable_moe_block=moe, use_double_wide_mlp=double_wide,
        num_experts=n_experts, top_k_experts=top_k, moe_intermediate_size=moe_inter,
        tie_word_embeddings=bool(d.get("tie_word_embeddings", True)),
        pad_token_id=_int(d, "pad_token_id", w, 0, allow_none=True) or 0,
        bos_token_id=_int(d, "bos_token_id", w, 0, allow_none=True) or 2,
        eos_token_ids=_ids(d.get("eos_token_id"), "eos_token_id", w),
        layer_types=tuple(layer_types), layers=tuple(layers),
    )


_SPECIAL_IDS = ("boi_token_id", "eoi_token_id", "image_token_id", "video_token_id", "boa_token_id",
                "eoa_token_id", "eoa_token_index", "audio_token_id")


def parse_config(raw: dict[str, Any], where: str = "config.json") -> Gemma4Config:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: the top level must be a JSON object")
    model_type = raw.get("model_type")
    if model_type in ("gemma4", "gemma4_unified"):
        text = parse_text_config(raw.get("text_config"), model_type == "gemma4_unified", where)
        vision = raw.get("vision_config")
        audio = raw.get("audio_config")
    elif model_type in ("gemma4_text", "gemma4_unified_text"):
        text = parse_text_config(raw, model_type == "gemma4_unified_text", where)
        vision = audio = None
    else:
        raise _fail("model_type", f"'{model_type}' is not a Gemma 4 model (gemma4, gemma4_unified, gemma4_text)", where)
    if not text.tie_word_embeddings and raw.get("tie_word_embeddings") is False:
        raise _fail("tie_word_embeddings", "false is not supported (Gemma 4 ties the LM head to the embeddings)", where)
    specials = {k: raw[k] for k in _SPECIAL_IDS if isinstance(raw.get(k), int)}
    eos = _ids(raw.get("eos_token_id"), "eos_token_id", where) or text.eos_token_ids
    return Gemma4Config(model_type=model_type, text=text, vision=vision if isinstance(vision, dict) else None,
                        audio=audio if isinstance(audio, dict) else None, eos_token_ids=eos,
                        special_token_ids=specials, raw=raw)


def load_config(path: str | os.PathLike) -> Gemma4Config:
    """Reads DIR/config.json (or the file itself)."""
    p = os.fspath(path)
    if os.path.isdir(p):
        p = os.path.join(p, "config.json")
    try:
        with open(p, "rb") as f:
            raw = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{p}: no config.json") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{p}: not valid JSON ({e})") from None
    return parse_config(raw, p)
