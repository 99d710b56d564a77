"""Bad input to a loaded text decoder: InputError / ConfigError / CheckpointError naming the cause."""

import json
import os
import shutil

import numpy as np
import pytest

import markbase as mb


@pytest.fixture(scope="module")
def model(load_model):
    return load_model("e2b")


@pytest.mark.parametrize("ids, match", [
    ([2, 5, 512], r"input_ids\[2\] = 512 is out of range"),
    ([2, -1], r"input_ids\[1\] = -1"),
    ([], "empty"),
    (np.array([2.0, 3.0]), "integer"),
    (["a", "b"], "integer"),
    (np.zeros((2, 3), np.int64), "one sequence"),
])
def test_bad_ids(model, ids, match):
    with pytest.raises(mb.InputError, match=match):
        model.logits(ids)


def test_decode_bad_token(model):
    sess = model.session()
    sess.prefill([2, 3])
    with pytest.raises(mb.InputError):
        sess.decode(100000)
    with pytest.raises(mb.InputError):
        sess.decode(1.5)
    assert sess.position == 2  # a rejected call changes nothing


def test_context_limit(oracle):
    model = mb.load(os.path.join(oracle["e2b"], "f32"), max_context=12)
    sess = model.session()
    sess.prefill(list(range(2, 12)))
    sess.decode(5)
    sess.decode(6)
    with pytest.raises(mb.InputError, match="context limit"):
        sess.decode(7)
    with pytest.raises(mb.InputError, match="max_context"):
        mb.load(os.path.join(oracle["e2b"], "f32"), max_context=10**9)


def test_config_weight_mismatch(oracle, tmp_path):
    d = tmp_path / "ckpt"
    shutil.copytree(os.path.join(oracle["31b"], "f32"), d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["text_config"]["hidden_size"] = 96
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(mb.CheckpointError, match=r"shape mismatch: model\.language_model\.embed_tokens\.weight"):
        mb.load(d)


def test_unknown_model_type(oracle, tmp_path):
    d = tmp_path / "ckpt"
    shutil.copytree(os.path.join(oracle["31b"], "f32"), d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "gemma3"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(mb.ConfigError, match="model_type"):
        mb.load(d)


def test_missing_directory(tmp_path):
    with pytest.raises(mb.MarkbaseError):
        mb.load(tmp_path / "nope")


def test_devices(oracle):
    with pytest.raises(mb.DeviceError, match="metal"):
        mb.load(os.path.join(oracle["e2b"], "f32"), device="metal")
    with pytest.raises(mb.DeviceError, match="unknown device"):
        mb.load(os.path.join(oracle["e2b"], "f32"), device="cuda")


def test_checkpoint_without_tokenizer_loads(oracle):
    d = os.path.join(oracle["e2b"], "f32")
    assert not any(f.startswith("tokenizer") for f in os.listdir(d))
    assert mb.load(d).logits([2, 3, 4]).shape == (3, 512)
