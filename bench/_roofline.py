"""Work counts of the Gemma 4 text decoder for bench/compare.py's roofline fractions.

- decode: bytes of weights one step reads (every text weight but the PLE table, which is a gather of
  one row per token; the tied embedding counted once, as the LM head) — as stored in the checkpoint.
- prefill: the FLOPs a prefill of T tokens cannot avoid: 2·(matrix elements) per row through every layer
  whose K/V later tokens need, the trailing KV-sharing layers (they write no cache) and the LM head for
  the last row only, plus attention (QKᵀ and PV, causal, sliding layers capped at the window).
  An engine that runs every row through every layer does more work than this and shows a lower fraction.
"""

from __future__ import annotations

import json
import os

_TEXT = "model.language_model."


def _text_config(checkpoint: str) -> dict:
    with open(os.path.join(checkpoint, "config.json")) as f:
        cfg = json.load(f)
    return cfg.get("text_config") or cfg


def checkpoint_decode_bytes(checkpoint: str) -> int:
    """Bytes of stored text weights read per decode step (markbase.memory.text_weight_bytes)."""
    from markbase.memory import text_weight_bytes

    return text_weight_bytes(checkpoint)


def _keys_attended(rows: range, window: int | None) -> int:
    """Σ over query positions t in rows of the number of keys t attends to (causal, optional window)."""
    return sum(min(t + 1, window) if window else t + 1 for t in rows)


def prefill_flops(checkpoint: str, T: int, minimum: bool = True) -> float:
    """FLOPs of a T-token prefill that returns the last position's logits: the minimum (see module doc),
    or with minimum=False every row through every layer (what an engine without the KV-sharing shortcut
    does; the LM head still for the last row only)."""
    from markbase.io import open_checkpoint

    cfg = _text_config(checkpoint)
    ckpt = open_checkpoint(checkpoint)
    n_layers = cfg["num_hidden_layers"]
    first_shared = n_layers - (cfg.get("num_kv_shared_layers") or 0)
    matrix_elems = [0] * n_layers
    q_width = [0] * n_layers
    other = 0  # per-row matrices outside the layers (the PLE model projection)
    for name in ckpt.keys():
        shape = ckpt.shape(name)
        if not name.startswith(_TEXT) or len(shape) != 2 or "embed_tokens" in name:
            continue
        if ".layers." not in name:
            other += shape[0] * shape[1]
            continue
        i = int(name.split(".layers.")[1].split(".")[0])
        matrix_elems[i] += shape[0] * shape[1]
        if name.endswith("self_attn.q_proj.weight"):
            q_width[i] = shape[0]
    flops = 2.0 * T * other + 2.0 * cfg["vocab_size"] * cfg["hidden_size"]  # + the LM head, last row
    for i in range(n_layers):
        rows = range(T) if i < first_shared or not minimum else range(T - 1, T)
        window = cfg["sliding_window"] if cfg["layer_types"][i] == "sliding_attention" else None
        flops += 2.0 * len(rows) * matrix_elems[i]
        flops += 4.0 * q_width[i] * _keys_attended(rows, window)
    return flops
