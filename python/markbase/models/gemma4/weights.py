"""The Gemma 4 weight table: every tensor a checkpoint of a given config holds, with its shape.

One list serves both loading and `validate`. Names are the transformers module names (what
`save_pretrained` writes for gemma4); `aliases` lists other on-disk spellings that mean the same tensor
(the legacy doubled `model.language_model.model.` prefix, the unified 12B checkpoint's
`vision_embedder.*` names). Roles:
  required — must be present with this shape;
  ignored  — may be present (KV-reuse layers' k/v projections, an untied copy of lm_head) and is never read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .config import FULL, Gemma4Config, TextConfig


@dataclass(frozen=True)
class WeightSpec:
    name: str
    shape: tuple[int, ...]
    component: str            # "text", "vision", "audio", "embed_vision", "embed_audio"
    layer: int | None = None  # decoder / encoder layer index, None for global tensors
    role: str = "required"    # "required" | "ignored"
    aliases: tuple[str, ...] = field(default=())

    @property
    def required(self) -> bool:
        return self.role == "required"

    def short(self, prefix: str) -> str:
        """The name with `prefix` removed (for messages grouped by layer)."""
        return self.name[len(prefix):] if self.name.startswith(prefix) else self.name


def text_prefix(cfg: Gemma4Config) -> str:
    return "model." if cfg.model_type in ("gemma4_text", "gemma4_unified_text") else "model.language_model."


def _text_specs(t: TextConfig, prefix: str) -> list[WeightSpec]:
    H = t.hidden_size
    out: list[WeightSpec] = []
    legacy = prefix + "model." if prefix == "model.language_model." else None

    def add(name: str, shape, layer=None, role="required"):
        aliases = (legacy + name,) if legacy else ()
        out.append(WeightSpec(prefix + name, tuple(shape), "text", layer, role, aliases))

    add("embed_tokens.weight", (t.vocab_size, H))
    add("norm.weight", (H,))
    if t.has_ple:
        L, P = t.num_hidden_layers, t.hidden_size_per_layer_input
        add("embed_tokens_per_layer.weight", (t.vocab_size_per_layer_input, L * P))
        add("per_layer_model_projection.weight", (L * P, H))
        add("per_layer_projection_norm.weight", (P,))
    for spec in t.layers:
        i, d, kv = spec.index, spec.head_dim, spec.num_kv_heads
        p = f"layers.{i}."
        for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"):
            add(p + norm + ".weight", (H,), i)
        add(p + "layer_scalar", (1,), i)
        add(p + "self_attn.q_proj.weight", (t.num_attention_heads * d, H), i)
        add(p + "self_attn.q_norm.weight", (d,), i)
        add(p + "self_attn.o_proj.weight", (H, t.num_attention_heads * d), i)
        # Reuse layers read another layer's cache: their own k/v weights, if saved, are never used.
        kv_role = "ignored" if spec.kv_mode == "reuse" else "required"
        add(p + "self_attn.k_proj.weight", (kv * d, H), i, kv_role)
        add(p + "self_attn.k_norm.weight", (d,), i, kv_role)
        if spec.has_v_proj:
            add(p + "self_attn.v_proj.weight", (kv * d, H), i, kv_role)
        I = spec.intermediate_size
        add(p + "mlp.gate_proj.weight", (I, H), i)
        add(p + "mlp.up_proj.weight", (I, H), i)
        add(p + "mlp.down_proj.weight", (H, I), i)
        if t.has_ple:
            P = t.hidden_size_per_layer_input
            add(p + "per_layer_input_gate.weight", (P, H), i)
            add(p + "per_layer_projection.weight", (H, P), i)
            add(p + "post_per_layer_input_norm.weight", (H,), i)
        if t.enable_moe_block:
            E, Im = t.num_experts, t.moe_intermediate_size
            add(p + "router.proj.weight", (E, H), i)
            add(p + "router.scale", (H,), i)
            add(p + "router.per_expert_scale", (E,), i)
            add(p + "experts.gate_up_proj", (E, 2 * Im, H), i)
            add(p + "experts.down_proj", (E, H, Im), i)
            for norm in ("pre_feedforward_layernorm_2", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2"):
                add(p + norm + ".weight", (H,), i)
    return out


def _clip_scalars(base: str, component: str, layer: int) -> list[WeightSpec]:
    return [WeightSpec(f"{base}.{b}", (), component, layer) for b in ("input_min", "input_max", "output_min", "output_max")]


def _vision_specs(v: dict[str, Any], text_hidden: int) -> list[WeightSpec]:
    D = int(v.get("hidden_size", 768))
    I = int(v.get("intermediate_size", 3072))
    heads = int(v.get("num_attention_heads", 12))
    kv_heads = int(v.get("num_key_value_heads", heads))
    hd = int(v.get("head_dim", 64))
    patch = int(v.get("patch_size", 16))
    pos = int(v.get("position_embedding_size", 10240))
    clipped = bool(v.get("use_clipped_linears", False))
    pre = "model.vision_tower."
    out = [WeightSpec(pre + "patch_embedder.input_proj.weight", (D, 3 * patch * patch), "vision"),
           WeightSpec(pre + "patch_embedder.position_embedding_table", (2, pos, D), "vision")]
    if v.get("standardize", False):
        out += [WeightSpec(pre + "std_bias", (D,), "vision"), WeightSpec(pre + "std_scale", (D,), "vision")]
    for i in range(int(v.get("num_hidden_layers", 16))):
        p = f"{pre}encoder.layers.{i}."
        linears = {"self_attn.q_proj": (heads * hd, D), "self_attn.k_proj": (kv_heads * hd, D),
                   "self_attn.v_proj": (kv_heads * hd, D), "self_attn.o_proj": (D, heads * hd),
                   "mlp.gate_proj": (I, D), "mlp.up_proj": (I, D), "mlp.down_proj": (D, I)}
        for name, shape in linears.items():
            out.append(WeightSpec(p + name + ".linear.weight", shape, "vision", i))
            if clipped:
                out += _clip_scalars(p + name, "vision", i)
        out += [WeightSpec(p + "self_attn.q_norm.weight", (hd,), "vision", i),
                WeightSpec(p + "self_attn.k_norm.weight", (hd,), "vision", i)]
        for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"):
            out.append(WeightSpec(p + norm + ".weight", (D,), "vision", i))
    out.append(WeightSpec("model.embed_vision.embedding_projection.weight", (text_hidden, D), "embed_vision"))
    return out


def _audio_specs(a: dict[str, Any], text_hidden: int) -> list[WeightSpec]:
    Hd = int(a.get("hidden_size", 1024))
    heads = int(a.get("num_attention_heads", 8))
    c0, c1 = (list(a.get("subsampling_conv_channels", [128, 32])) + [128, 32])[:2]
    K = int(a.get("conv_kernel_size", 5))
    out_dims = int(a.get("output_proj_dims", 1536))
    clipped = bool(a.get("use_clipped_linears", True))
    pre = "model.audio_tower."
    sp = pre + "subsample_conv_projection."
    out = [WeightSpec(sp + "layer0.conv.weight", (c0, 1, 3, 3), "audio"),
           WeightSpec(sp + "layer0.norm.weight", (c0,), "audio"),
           WeightSpec(sp + "layer1.conv.weight", (c1, c0, 3, 3), "audio"),
           WeightSpec(sp + "layer1.norm.weight", (c1,), "audio"),
           WeightSpec(sp + "input_proj_linear.weight", (Hd, (c0 // 4) * c1), "audio")]
    for i in range(int(a.get("num_hidden_layers", 12))):
        p = f"{pre}layers.{i}."
        linears = {"feed_forward1.ffw_layer_1": (4 * Hd, Hd), "feed_forward1.ffw_layer_2": (Hd, 4 * Hd),
                   "feed_forward2.ffw_layer_1": (4 * Hd, Hd), "feed_forward2.ffw_layer_2": (Hd, 4 * Hd),
                   "self_attn.q_proj": (Hd, Hd), "self_attn.k_proj": (Hd, Hd), "self_attn.v_proj": (Hd, Hd),
                   "self_attn.post": (Hd, Hd), "lconv1d.linear_start": (2 * Hd, Hd), "lconv1d.linear_end": (Hd, Hd)}
        for name, shape in linears.items():
            out.append(WeightSpec(p + name + ".linear.weight", shape, "audio", i))
            if clipped:
                out += _clip_scalars(p + name, "audio", i)
        out += [WeightSpec(p + "self_attn.relative_k_proj.weight", (Hd, Hd), "audio", i),
                WeightSpec(p + "self_attn.per_dim_scale", (Hd // heads,), "audio", i),
                WeightSpec(p + "lconv1d.depthwise_conv1d.weight", (Hd, 1, K), "audio", i)]
        for norm in ("feed_forward1.pre_layer_norm", "feed_forward1.post_layer_norm", "feed_forward2.pre_layer_norm",
                     "feed_forward2.post_layer_norm", "lconv1d.pre_layer_norm", "lconv1d.conv_norm",
                     "norm_pre_attn", "norm_post_attn", "norm_out"):
            out.append(WeightSpec(p + norm + ".weight", (Hd,), "audio", i))
    out += [WeightSpec(pre + "output_proj.weight", (out_dims, Hd), "audio"),
            WeightSpec(pre + "output_proj.bias", (out_dims,), "audio"),
            WeightSpec("model.embed_audio.embedding_projection.weight", (text_hidden, out_dims), "embed_audio")]
    return out


def _unified_specs(v: dict[str, Any] | None, a: dict[str, Any] | None, text_hidden: int) -> list[WeightSpec]:
    out: list[WeightSpec] = []
    if v is not None:
        mp = int(v.get("model_patch_size", int(v.get("patch_size", 16)) * int(v.get("pooling_kernel_size", 3))))
        E = int(v.get("mm_embed_dim", text_hidden))
        pos = int(v.get("mm_posemb_size", 1120))
        proj = int(v.get("output_proj_dims", E))
        flat = 3 * mp * mp
        # The released 12B checkpoint spells these `model.vision_embedder.*` (renamed by transformers at load).
        shapes = {"patch_ln1.weight": (flat,), "patch_ln1.bias": (flat,), "patch_dense.weight": (E, flat),
                  "patch_dense.bias": (E,), "patch_ln2.weight": (E,), "patch_ln2.bias": (E,),
                  "pos_embedding": (pos, 2, E), "pos_norm.weight": (E,), "pos_norm.bias": (E,)}
        for name, shape in shapes.items():
            out.append(WeightSpec("model.embed_vision." + name, shape, "embed_vision",
                                  aliases=("model.vision_embedder." + name,)))
        out.append(WeightSpec("model.embed_vision.multimodal_embedder.embedding_projection.weight", (text_hidden, proj),
                              "embed_vision", aliases=("model.embed_vision.embedding_projection.weight",)))
    if a is not None:
        out.append(WeightSpec("model.embed_audio.embedding_projection.weight",
                              (text_hidden, int(a.get("audio_embed_dim", 640))), "embed_audio"))
    return out


def weight_table(cfg: Gemma4Config) -> list[WeightSpec]:
    """Every tensor a checkpoint of this config holds (plus the ignorable ones), in a stable order."""
    prefix = text_prefix(cfg)
    specs = _text_specs(cfg.text, prefix)
    H = cfg.text.hidden_size
    if cfg.is_unified:
        specs += _unified_specs(cfg.vision, cfg.audio, H)
    elif cfg.model_type == "gemma4":
        if cfg.vision is not None:
            specs += _vision_specs(cfg.vision, H)
        if cfg.audio is not None:
            specs += _audio_specs(cfg.audio, H)
    # An untied copy of the LM head is tolerated and never read (the head is tied to embed_tokens).
    specs.append(WeightSpec("lm_head.weight", (cfg.text.vocab_size, H), "text", role="ignored"))
    return specs


def layer_of(spec: WeightSpec) -> str:
    """'text layer 3', 'vision layer 0', 'text (global)'."""
    return f"{spec.component} layer {spec.layer}" if spec.layer is not None else f"{spec.component} (global)"


__all__ = ["WeightSpec", "weight_table", "text_prefix", "layer_of", "FULL"]
