"""Memory bounds at load (issue 14, item 3): the plan's figures against the model's real caches and
tensors, a max_context that does not fit refused with the numbers, and the default max_context shrunk to
what fits (MARKBASE_MEMORY_LIMIT stands in for the machine's available memory)."""

import os

import numpy as np
import pytest

import markbase as mb
from markbase.io import open_checkpoint


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from markbase.testing import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("plan") / "e2b", family="e2b", size="tiny", dtype="bf16", seed=1,
                           text_only=True)


def test_plan_figures(ckpt):
    model = mb.load(ckpt, max_context=64)
    plan = model.memory_plan()
    tc = model.config.text_config
    # Text weights read every step: every text tensor but the PLE table, as stored.
    ck = open_checkpoint(ckpt)
    mapped = sum(ck.offsets(n)[1] - ck.offsets(n)[0] for n in ck.keys()
                 if n.startswith("model.language_model.") and "embed_tokens_per_layer" not in n)
    assert plan["weights_mapped_bytes"] == mapped and plan["weights_resident_bytes"] == 0
    per_token = sum(2 * l.num_key_value_heads * l.head_dim * 4 + 8 for l in tc.layers
                    if l.kv_mode != "reuse" and not l.is_sliding)
    assert plan["kv_bytes_per_token"] == per_token
    assert plan["total_bytes"] == (plan["weights_mapped_bytes"] + plan["kv_cache_bytes"] + plan["arena_bytes"])
    # The KV figure is what a session holds once full (to 1%: the caches' small bookkeeping is not counted).
    sess = model.session()
    sess.prefill(np.full(64, 5))
    assert abs(sess._s.cache_bytes() - plan["kv_cache_bytes"]) <= 0.01 * plan["kv_cache_bytes"]


def test_max_context_that_does_not_fit_is_refused_with_the_numbers(ckpt, monkeypatch):
    small = mb.load(ckpt, max_context=64).memory_plan()
    per_token = small["kv_bytes_per_token"] + small["kv_ring_slot_bytes"]  # (the rings are longer than 64)
    monkeypatch.setenv("MARKBASE_MEMORY_LIMIT", str(small["total_bytes"] + 1000 * per_token))
    with pytest.raises(mb.ConfigError, match=r"needs .* GB = text weights .* KV cache .* at max_context 4096 .* "
                                               r"GB is available; lower max_context"):
        mb.load(ckpt, max_context=4096)
    model = mb.load(ckpt)  # no max_context: the longest that fits
    plan = model.memory_plan()
    assert 64 + 1000 <= model.max_context < model.config.text_config.max_position_embeddings
    assert plan["max_context"] == model.max_context
    # It fits, and one more token would not (past the rings' length only the full layers grow).
    assert plan["total_bytes"] <= plan["available_bytes"] < plan["total_bytes"] + plan["kv_bytes_per_token"]
    assert model.session().prefill(np.full(model.max_context - 1, 5)).shape  # and it runs at that length


def test_quantized_plan_and_nothing_fits(ckpt, monkeypatch):
    plan = mb.load(ckpt, max_context=64, quantize="q4").memory_plan()
    assert plan["weights_mapped_bytes"] == 0 and plan["weights_resident_bytes"] > 0
    monkeypatch.setenv("MARKBASE_MEMORY_LIMIT", "1000")
    with pytest.raises(mb.ConfigError, match="even a 1-token context does not fit"):
        mb.load(ckpt)
    monkeypatch.setenv("MARKBASE_MEMORY_LIMIT", "lots")
    with pytest.raises(mb.ConfigError, match="MARKBASE_MEMORY_LIMIT"):
        mb.load(ckpt)


def test_plan_counts_a_widened_ple_table(tmp_path):
    """An MLX 6-bit PLE table is held widened to bytes (resident, where a stored one stays a lazily touched
    mapping the plan leaves out): the plan adds its held bytes. (Plan arithmetic on the table alone: the tiny
    models' PLE rows of 80 values hold no whole group of 32, so no loadable 6-bit table exists at that size.)"""
    import json
    import shutil

    from safetensors.numpy import load_file, save_file

    from markbase.memory import plan_for, text_weight_bytes, widened_table_bytes
    from markbase.models.gemma4 import load_config
    from markbase.testing import make_checkpoint

    src = make_checkpoint(tmp_path / "q4", family="e2b", size="tiny", dtype="f32", seed=1, text_only=True, bits=4)
    d = tmp_path / "ple6"
    shutil.copytree(src, d)
    name = next(n for n in open_checkpoint(src).keys() if "embed_tokens_per_layer" in n)
    base = name[: -len(".weight")]
    path = next(str(d / f) for f in os.listdir(d) if f.endswith(".safetensors") and name in load_file(str(d / f)))
    tensors = load_file(path)
    rows, cols = open_checkpoint(src).shape(name)[0], 80
    tensors[name] = np.zeros((rows, cols * 6 // 32), np.uint32)
    tensors[base + ".scales"] = tensors[base + ".biases"] = np.ones((rows, 5), np.float32)
    save_file(tensors, path)
    cfg = json.load(open(d / "config.json"))
    cfg["quantization"][base] = {"group_size": 16, "bits": 6}
    json.dump(cfg, open(d / "config.json", "w"))
    config = load_config(str(d))
    assert widened_table_bytes(str(src), config) == 0
    assert widened_table_bytes(str(d), config) == rows * cols  # one byte per value
    assert text_weight_bytes(str(d), config) == text_weight_bytes(str(src), config)  # not read per step
    grow = plan_for(str(d), config, 64, 0, 64).weights_resident_bytes - plan_for(str(src), config, 64, 0, 64).weights_resident_bytes
    assert grow == rows * cols
