"""Gemma 4 config.json parsing: the C++ parser (csrc/models/gemma4/config.cpp) behind a Python face.

The parsed config keeps transformers' field names end to end (`cfg.text_config.hidden_size`,
`cfg.vision_config`, `cfg.eos_token_id`, ...), read-only; per-layer facts are in
`cfg.text_config.layers` (LayerSpec). Every inconsistency is a ConfigError naming the file and field.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..._core import ConfigError
from ..._core import gemma4 as _g

Gemma4Config = _g.Gemma4Config
TextConfig = _g.TextConfig
LayerSpec = _g.LayerSpec

SLIDING = "sliding_attention"
FULL = "full_attention"


def parse_config(raw: dict[str, Any] | str, where: str = "config.json") -> Gemma4Config:
    """Parses a config given as a dict (as json.load returns it) or as JSON text."""
    if isinstance(raw, str):
        return _g.parse_config(raw, where)
    try:
        text = json.dumps(raw, allow_nan=False)
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None
    except TypeError as e:
        raise ConfigError(f"{where}: not a JSON object ({e})") from None
    return _g.parse_config(text, where)


def load_config(path: str | os.PathLike) -> Gemma4Config:
    """Reads DIR/config.json (or the file itself)."""
    return _g.load_config(os.fspath(path))
