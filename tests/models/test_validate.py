"""`markbase.validate` and `markbase.load` on broken copies of an oracle checkpoint."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import markbase as mb

PREFIX = "model.language_model."


@pytest.fixture
def e2b(oracle, tmp_path):
    """A writable copy of the e2b f32 checkpoint: (dir, tensors dict)."""
    src = os.path.join(oracle["e2b"], "f32")
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    return str(dst), load_file(os.path.join(src, "model.safetensors"))


def write(d, tensors):
    save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})


def shard(d, tensors, n=2):
    """Rewrites the checkpoint as n shards with an index."""
    os.remove(os.path.join(d, "model.safetensors"))
    names = sorted(tensors)
    weight_map = {}
    for i in range(n):
        fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        part = {k: tensors[k] for k in names[i::n]}
        save_file(part, os.path.join(d, fname))
        weight_map.update({k: fname for k in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def test_intact_checkpoint_is_ok(e2b):
    d, _ = e2b
    report = mb.validate(d)
    assert report.ok, str(report)
    assert report.values_scanned and "OK" in str(report)


def test_deleted_layer(e2b):
    d, t = e2b
    write(d, {k: v for k, v in t.items() if not k.startswith(PREFIX + "layers.3.")})
    report = mb.validate(d)
    assert not report.ok
    assert "text layer 3: missing 17 of 17 tensors" in str(report)
    assert "self_attn.q_proj.weight" in str(report)
    with pytest.raises(mb.CheckpointError, match="text layer 3: missing 17 of 17"):
        mb.load(d)


def test_dropped_shard(e2b):
    d, t = e2b
    shard(d, t)
    assert mb.validate(d).ok
    os.remove(os.path.join(d, "model-00002-of-00002.safetensors"))
    report = mb.validate(d)
    assert not report.ok
    assert "missing shard file model-00002-of-00002.safetensors" in str(report)
    with pytest.raises(mb.CheckpointError, match="model-00002-of-00002"):
        mb.load(d)


def test_truncated_shard(e2b):
    d, t = e2b
    shard(d, t)
    p = os.path.join(d, "model-00001-of-00002.safetensors")
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) - 100)
    report = mb.validate(d)
    assert "unreadable shard model-00001-of-00002.safetensors" in str(report)
    with pytest.raises(mb.CheckpointError):
        mb.load(d)


def test_wrong_shape(e2b):
    d, t = e2b
    name = PREFIX + "layers.2.mlp.up_proj.weight"
    t[name] = t[name][:-1]
    write(d, t)
    report = mb.validate(d)
    assert f"shape mismatch: {name}" in str(report)
    assert "expected [96, 64]" in str(report)
    with pytest.raises(mb.CheckpointError, match="layers.2.mlp.up_proj.weight"):
        mb.load(d)


def test_wrong_dtype(e2b):
    d, t = e2b
    name = PREFIX + "norm.weight"
    t[name] = t[name].astype(np.int32)
    write(d, t)
    assert f"dtype mismatch: {name}" in str(mb.validate(d))


def test_injected_nan(e2b):
    d, t = e2b
    name = PREFIX + "layers.1.mlp.down_proj.weight"
    t[name] = t[name].copy()
    t[name][3, 5] = np.nan
    write(d, t)
    report = mb.validate(d)
    assert not report.ok
    assert f"non-finite values: {name}" in str(report)
    # load checks structure only; the NaN is caught before it reaches the caller as logits.
    model = mb.load(d)
    with pytest.raises(mb.MarkbaseError, match="NaN"):
        model.logits([2, 5, 6])


def test_unexpected_tensor(e2b):
    d, t = e2b
    t["model.language_model.layers.0.mystery.weight"] = np.zeros(3, np.float32)
    write(d, t)
    assert "unexpected tensors (1): model.language_model.layers.0.mystery.weight" in str(mb.validate(d))


def test_cli_validate_exit_codes(e2b):
    d, t = e2b
    ok = subprocess.run([sys.executable, "-m", "markbase", "validate", d], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "OK" in ok.stdout
    write(d, {k: v for k, v in t.items() if not k.startswith(PREFIX + "layers.3.")})
    bad = subprocess.run([sys.executable, "-m", "markbase", "validate", d], capture_output=True, text=True)
    assert bad.returncode == 1
    assert "text layer 3: missing 17 of 17 tensors" in bad.stdout


def test_legacy_doubled_prefix_loads(e2b, oracle):
    d, t = e2b
    write(d, {(k.replace(PREFIX, PREFIX + "model.", 1) if k.startswith(PREFIX) else k): v for k, v in t.items()})
    assert mb.validate(d).ok
    ref = np.load(os.path.join(oracle["e2b"], "reference.npz"))
    np.testing.assert_allclose(mb.load(d).logits(ref["ids"]), ref["logits"], rtol=0, atol=1e-4 * np.abs(ref["logits"]).max())


def test_reuse_layer_kv_weights_are_tolerated_and_ignored(e2b, oracle):
    d, t = e2b
    # Layer 9 reuses layer 4's cache (e2b fixture: 10 layers, the last 4 share): give it garbage k/v weights.
    for name, shape in (("k_proj.weight", (32, 64)), ("v_proj.weight", (32, 64)), ("k_norm.weight", (32,))):
        t[f"{PREFIX}layers.9.self_attn.{name}"] = np.full(shape, np.float32(1e6))
    write(d, t)
    report = mb.validate(d)
    assert report.ok, str(report)
    ref = np.load(os.path.join(oracle["e2b"], "reference.npz"))
    np.testing.assert_allclose(mb.load(d).logits(ref["ids"]), ref["logits"], rtol=0, atol=1e-4 * np.abs(ref["logits"]).max())


def test_untied_lm_head_copy_is_ignored(e2b):
    d, t = e2b
    t["lm_head.weight"] = t[PREFIX + "embed_tokens.weight"].copy()
    write(d, t)
    assert mb.validate(d).ok
