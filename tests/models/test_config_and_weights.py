"""Config parsing (both config.json forms) and the weight table against the released tensor lists."""

import copy
import json
import os

import pytest

import markbase as mb
from markbase.models.gemma4 import parse_config, weight_table

from markbase.testing.released import RELEASED as RELEASED_CONFIGS

# The tensor lists are the independent truth: every name and shape of the five released checkpoints,
# from instantiating their configs in transformers (copied from shared/reference/weights/).
DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "released")
RELEASED = sorted(RELEASED_CONFIGS)


def released(name):
    return json.loads(json.dumps(RELEASED_CONFIGS[name]))


def released_tensors(name):
    out = {}
    with open(os.path.join(DATA, f"{name}.weights.txt")) as f:
        for line in f:
            tensor, shape, _ = line.rstrip("\n").split("\t")
            out[tensor] = tuple(json.loads(shape))
    return out


@pytest.mark.parametrize("name", RELEASED)
def test_weight_table_equals_released_tensor_list(name):
    table = {s.name: s.shape for s in weight_table(parse_config(released(name), name)) if s.required}
    want = released_tensors(name)
    assert sorted(set(want) - set(table)) == [], "tensors the table does not know"
    assert sorted(set(table) - set(want)) == [], "tensors the table invents"
    assert {n: s for n, s in table.items() if s != want[n]} == {}


def test_released_layer_maps():
    e2b = parse_config(released("gemma-4-E2B-it")).text_config
    full = [L.index for L in e2b.layers if not L.is_sliding]
    assert full == [4, 9, 14, 19, 24, 29, 34]
    assert [L.index for L in e2b.layers if L.kv_mode == "store"] == [13, 14]
    assert all(L.kv_mode == "reuse" for L in e2b.layers[15:])
    assert e2b.layers[20].kv_source == 13 and e2b.layers[19].kv_source == 14
    assert {L.intermediate_size for L in e2b.layers[:15]} == {6144}
    assert {L.intermediate_size for L in e2b.layers[15:]} == {12288}
    assert e2b.layers[4].head_dim == 512 and e2b.layers[4].num_key_value_heads == 1  # no k=v: no global kv override
    a4b = parse_config(released("gemma-4-26B-A4B-it")).text_config
    assert a4b.layers[5].num_key_value_heads == 2 and a4b.layers[5].head_dim == 512 and not a4b.layers[5].has_v_proj
    assert a4b.layers[0].num_key_value_heads == 8 and a4b.layers[0].has_v_proj
    assert a4b.enable_moe_block and a4b.num_experts == 128 and a4b.top_k_experts == 8
    u12 = parse_config(released("gemma-4-12B-it"))
    assert u12.is_unified and not u12.text_config.has_ple and u12.text_config.layers[5].num_key_value_heads == 1


def test_transformers_form_equals_published_form():
    """transformers writes per_layer_config instead of global_head_dim / num_global_key_value_heads."""
    pub = released("gemma-4-31B-it")
    tf = copy.deepcopy(pub)
    t = tf["text_config"]
    full = [i for i, lt in enumerate(t["layer_types"]) if lt == "full_attention"]
    t["per_layer_config"] = {str(i): {"head_dim": t.pop("global_head_dim") if i == full[0] else 512,
                                      "num_key_value_heads": 4} for i in full}
    t.pop("num_global_key_value_heads")
    assert parse_config(tf).text_config.layers == parse_config(pub).text_config.layers


@pytest.mark.parametrize("mutate, field", [
    (lambda c: c.update(model_type="llama"), "model_type"),
    (lambda c: c["text_config"].update(num_key_value_heads=3), "num_key_value_heads"),
    (lambda c: c["text_config"].update(layer_types=["sliding_attention"]), "layer_types"),
    (lambda c: c["text_config"].update(hidden_size="big"), "hidden_size"),
    (lambda c: c["text_config"].update(hidden_activation="relu"), "hidden_activation"),
    (lambda c: c["text_config"].update(num_kv_shared_layers=35), "num_kv_shared_layers"),
    (lambda c: c["text_config"]["rope_parameters"]["full_attention"].update(rope_type="yarn"), "rope_type"),
    (lambda c: c["text_config"].update(per_layer_config={"99": {"head_dim": 8}}), "per_layer_config.99"),
    (lambda c: c["text_config"].update(attention_bias=True), "attention_bias"),
])
def test_bad_config_names_the_field(mutate, field):
    cfg = released("gemma-4-E2B-it")
    mutate(cfg)
    with pytest.raises(mb.ConfigError, match=field.replace(".", r"\.")):
        parse_config(cfg)


@pytest.mark.parametrize("mutate, field", [
    (lambda c: c["text_config"].update(hidden_size=10**9), "hidden_size"),
    (lambda c: c["text_config"].update(num_hidden_layers=10**7, layer_types=None), "num_hidden_layers"),
    (lambda c: c["text_config"].update(intermediate_size=2**40), "intermediate_size"),
    (lambda c: c["text_config"].update(vocab_size=10**12), "vocab_size"),
    (lambda c: c["text_config"].update(max_position_embeddings=2**62), "max_position_embeddings"),
    (lambda c: c["text_config"].update(eos_token_id=[1, 10**10]), "eos_token_id"),
    (lambda c: c["text_config"].update(per_layer_config={"0": {"head_dim": 10**9}}), "per_layer_config.0.head_dim"),
    (lambda c: c["vision_config"].update(num_hidden_layers=10**6), "num_hidden_layers"),
    (lambda c: c["audio_config"].update(hidden_size=10**9), "hidden_size"),
])
def test_absurd_sizes_are_refused_from_the_config_alone(mutate, field):
    """A config claiming a 10⁹-wide layer or 10⁷ layers is a ConfigError naming the field, before anything
    is sized from it (sizes at most 2^24, layer counts at most 4096)."""
    cfg = released("gemma-4-E2B-it")
    mutate(cfg)
    with pytest.raises(mb.ConfigError, match=field.replace(".", r"\.") + ".*(beyond what markbase accepts|16777216)"):
        parse_config(cfg)


def test_moe_config_needs_expert_counts():
    cfg = released("gemma-4-26B-A4B-it")
    cfg["text_config"]["top_k_experts"] = None
    with pytest.raises(mb.ConfigError, match="top_k_experts"):
        parse_config(cfg)


def test_oracle_checkpoint_configs_parse(oracle):
    """Checkpoints saved by transformers (per_layer_config form) parse and match their weights exactly."""
    from markbase.io import open_checkpoint
    from markbase.models.gemma4 import load_config

    for family, d in oracle.items():
        cfg = load_config(os.path.join(d, "f32"))
        ckpt = open_checkpoint(os.path.join(d, "f32"))
        # transformers saves the unified vision embedder under its on-disk names (aliases).
        table = {a: s for s in weight_table(cfg) for a in (s.name, *s.aliases)}
        names = set(ckpt.keys())
        found = {table[n].name for n in names if n in table}
        assert {s.name for s in table.values() if s.required} <= found, family
        assert names - set(table) == set(), family
        for n in names:
            assert tuple(ckpt.shape(n)) == table[n].shape, (family, n)
