"""Gemma 4 (gemma4 and gemma4_unified): config, weight table."""

from .config import Gemma4Config, LayerSpec, TextConfig, load_config, parse_config
from .weights import WeightSpec, weight_table

__all__ = ["Gemma4Config", "LayerSpec", "TextConfig", "load_config", "parse_config", "WeightSpec", "weight_table"]
