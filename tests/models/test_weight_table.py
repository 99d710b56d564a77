"""One weight table drives `validate` and `load` (csrc/models/gemma4/*: each part's visit_weights names
every tensor once; the same walk lists the table and binds the model), and it already describes the
encoders, so `validate` names a missing vision / audio / 12B-embedder tensor with its layer."""

import os
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import markbase as mb
from markbase import _core
from markbase.models.gemma4 import load_config, weight_table

NORM = "model.language_model.layers.2.post_attention_layernorm.weight"


def copy_without(oracle, family, tmp_path, drop):
    """A copy of the family's f32 checkpoint without the tensors named in `drop`."""
    src = os.path.join(oracle[family], "f32")
    dst = str(tmp_path / family)
    shutil.copytree(src, dst)
    tensors = load_file(os.path.join(src, "model.safetensors"))
    assert set(drop) <= set(tensors)
    save_file({k: v for k, v in tensors.items() if k not in drop}, os.path.join(dst, "model.safetensors"),
              metadata={"format": "pt"})
    return dst


@pytest.fixture
def drop_from_table():
    """Deletes entries from the table for one test (the C++ walk's test seam), then restores it."""
    def drop(*names):
        _core.gemma4._set_weight_filter(lambda spec: spec.name not in names)
    yield drop
    _core.gemma4._set_weight_filter(None)


def test_deleting_a_tensor_from_the_table_stops_both_validate_and_load_expecting_it(oracle, tmp_path, drop_from_table):
    d = copy_without(oracle, "e2b", tmp_path, [NORM])
    # With the full table both refuse the checkpoint, naming the tensor.
    assert "post_attention_layernorm.weight" in str(mb.validate(d))
    with pytest.raises(mb.CheckpointError, match="text layer 2: missing 1 of"):
        mb.load(d)
    full = mb.load(os.path.join(oracle["e2b"], "f32"))
    ids = np.load(os.path.join(oracle["e2b"], "reference.npz"))["ids"]

    drop_from_table(NORM)
    assert NORM not in {s.name for s in weight_table(load_config(d))}
    report = mb.validate(d)
    assert report.ok, str(report)
    model = mb.load(d)
    # The model runs without the norm's scale: nothing read it from anywhere else.
    assert np.max(np.abs(model.logits(ids) - full.logits(ids))) > 1e-3


def test_a_table_entry_is_what_load_binds(oracle, tmp_path, drop_from_table):
    """The checkpoint keeps the tensor, the table drops it: validate calls it unexpected, load never reads it."""
    d = os.path.join(oracle["e2b"], "f32")
    drop_from_table(NORM)
    report = mb.validate(d)
    assert NORM in report.unexpected


@pytest.mark.parametrize("family, name, group", [
    ("e2b", "model.vision_tower.encoder.layers.1.mlp.down_proj.linear.weight", "vision layer 1"),
    ("e4b", "model.vision_tower.encoder.layers.0.self_attn.q_proj.input_max", "vision layer 0"),
    ("26b", "model.vision_tower.std_bias", "vision (global)"),
    ("e2b", "model.audio_tower.layers.1.lconv1d.depthwise_conv1d.weight", "audio layer 1"),
    ("e4b", "model.audio_tower.subsample_conv_projection.layer1.conv.weight", "audio (global)"),
    ("31b", "model.embed_vision.embedding_projection.weight", "embed_vision (global)"),
    ("12b", "model.vision_embedder.patch_dense.weight", "embed_vision (global)"),  # on-disk alias
    ("12b", "model.embed_audio.embedding_projection.weight", "embed_audio (global)"),
])
def test_validate_names_missing_encoder_tensors(oracle, tmp_path, family, name, group):
    d = copy_without(oracle, family, tmp_path, [name])
    report = mb.validate(d)
    assert not report.ok
    short = name[len("model."):]
    assert f"{group}: missing 1 of" in str(report) and short.split(".")[-2] in str(report), str(report)
    with pytest.raises(mb.CheckpointError, match=group.replace("(", r"\(").replace(")", r"\)")):
        mb.load(d)


def test_released_vision_layer_3_down_proj_is_in_the_table():
    """The issue's own example: the E2B vision tower's layer 3 MLP down projection."""
    from markbase.models.gemma4 import parse_config
    from markbase.testing.released import RELEASED

    table = {s.name: s for s in weight_table(parse_config(RELEASED["gemma-4-E2B-it"]))}
    spec = table["model.vision_tower.encoder.layers.3.mlp.down_proj.linear.weight"]
    assert spec.shape == (768, 3072) and spec.component == "vision" and spec.layer == 3 and spec.required
