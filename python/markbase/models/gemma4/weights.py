"""The Gemma 4 weight table, from the C++ model (csrc/models/gemma4/*: each part's `visit_weights`).

The same walk that binds the model's tensors at load builds this list, so `validate` and `load` expect
exactly the same tensors. Roles: `required` (must be present with this shape) and `ignored` (may be
present, never read: KV-reuse layers' k/v projections, an untied lm_head).
"""

from __future__ import annotations

from ..._core import gemma4 as _g
from .config import FULL, Gemma4Config

WeightSpec = _g.WeightSpec


def weight_table(cfg: Gemma4Config) -> list[WeightSpec]:
    """Every tensor a checkpoint of this config holds (plus the ignorable ones), in a stable order."""
    return list(_g.weight_table(cfg))


def text_prefix(cfg: Gemma4Config) -> str:
    return "model." if cfg.model_type in ("gemma4_text", "gemma4_unified_text") else "model.language_model."


def short_name(spec: WeightSpec, prefix: str) -> str:
    """The name with `prefix` removed (for messages grouped by layer)."""
    return spec.name[len(prefix):] if spec.name.startswith(prefix) else spec.name


def layer_of(spec: WeightSpec) -> str:
    """'text layer 3', 'vision layer 0', 'text (global)'."""
    return f"{spec.component} layer {spec.layer}" if spec.layer is not None else f"{spec.component} (global)"


__all__ = ["WeightSpec", "weight_table", "text_prefix", "short_name", "layer_of", "FULL"]
