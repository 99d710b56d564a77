"""First-non-finite tracing: a NaN planted in one weight of layer k is reported as layer k, the named
intermediate it reaches and the op that produced it, with the weight named among that op's inputs — by
`model.trace_nonfinite`, by `markbase trace`, and (MARKBASE_CHECK_FINITE=1) by any forward as a
NumericsError, on cpu and metal-sim."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import markbase as mb

DEVICES = mb.devices()
PROMPT = [2, 17, 33, 48, 90, 7]

# (family, planted weight, its layer, the intermediate the NaN reaches first, the op that produced it)
CASES = [
    ("e2b", "layers.3.mlp.down_proj.weight", 3, "ffn_mlp", "linear"),
    ("31b", "layers.4.self_attn.o_proj.weight", 4, "attn_out", "linear"),
    ("12b", "layers.1.self_attn.q_norm.weight", 1, "q", "rms_norm"),
    ("26b", "layers.2.router.proj.weight", 2, "ffn_moe_probs", "linear"),
]


def planted(oracle, tmp_path, family, weight):
    src = os.path.join(oracle[family], "f32")
    dst = str(tmp_path / f"{family}-nan")
    shutil.copytree(src, dst)
    tensors = load_file(os.path.join(src, "model.safetensors"))
    name = "model.language_model." + weight
    w = tensors[name].copy()
    w.reshape(-1)[w.size // 2] = np.nan
    tensors[name] = w
    save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    return dst, name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family, weight, layer, intermediate, op", CASES)
def test_trace_finds_the_planted_nan(oracle, tmp_path, family, weight, layer, intermediate, op, device):
    d, name = planted(oracle, tmp_path, family, weight)
    report = mb.load(d, device=device).trace_nonfinite(PROMPT)
    assert report and report.found
    assert (report.layer, report.intermediate, report.op, report.backend) == (layer, intermediate, op, device)
    assert report.where == f"layer {layer}, {intermediate} (op {op}, backend {device})"
    named = [line for line in report.inputs if line.startswith(name)]
    assert len(named) == 1 and " 1 NaN," in named[0], report.inputs
    assert "NaN" in report.output


@pytest.mark.parametrize("device", DEVICES)
def test_trace_of_a_sound_model_finds_nothing(oracle, load_model, device):
    report = load_model("e4b", device=device).trace_nonfinite(PROMPT)
    assert not report and "no NaN" in str(report)


def test_check_finite_env_raises_at_the_first_nonfinite_value(oracle, tmp_path, monkeypatch):
    d, name = planted(oracle, tmp_path, "e2b", "layers.3.mlp.down_proj.weight")
    plain = mb.load(d)
    assert not plain.check_finite
    with pytest.raises(mb.NumericsError, match="NaN/Inf logits"):  # caught late, at the logits
        plain.logits(PROMPT)
    monkeypatch.setenv("MARKBASE_CHECK_FINITE", "1")
    model = mb.load(d)
    assert model.check_finite
    sess = model.session()
    with pytest.raises(mb.NumericsError, match=r"layer 3, ffn_mlp \(op linear, backend cpu\)") as e:
        sess.prefill(PROMPT)
    assert name in str(e.value)
    # The failed forward was rolled back: the session is usable and empty again.
    assert sess.position == 0
    # A sound checkpoint runs unchanged with the checks on.
    sound = mb.load(os.path.join(oracle["e2b"], "f32"))
    ref = np.load(os.path.join(oracle["e2b"], "reference.npz"))
    got = sound.logits(ref["ids"])
    assert float(np.max(np.abs(got - ref["logits"])) / np.max(np.abs(ref["logits"]))) <= 1e-4


def test_cli_trace(oracle, tmp_path):
    d, name = planted(oracle, tmp_path, "31b", "layers.4.self_attn.o_proj.weight")
    # The oracle checkpoints carry no tokenizer: give the trace one from a synthetic checkpoint.
    from markbase.testing import make_checkpoint

    tok = str(tmp_path / "tok")
    make_checkpoint(tok, family="31b", size="tiny")
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(os.path.join(tok, f), d)
    r = subprocess.run([sys.executable, "-m", "markbase", "trace", d, "--prompt", "hi", "--raw"], capture_output=True,
                       text=True)
    assert r.returncode == 1, r.stderr
    assert "layer 4, attn_out (op linear, backend cpu)" in r.stdout and name in r.stdout
