"""Audio that breaks other engines encodes to finite soft tokens here, on cpu and metal-sim (whose launcher
checks every dispatch of the encoder for partially overlapping buffers and for inputs the host changed
after encoding): a 30 s clip (750 tokens, 63 attention chunks), a 0.05 s clip (1 token), silence (every
mel bin at the log floor), full-scale square waves, hard-clipped and over-range samples, denormal-level
noise. Run on the tiny E2B-like oracle tower (every norm, clip bound and per_dim_scale perturbed) in f32
and bf16, and compared across devices (1e-5 relative: the same f32 math in another order)."""

import numpy as np
import pytest

import markbase as mb

SR = 16000


def case(name: str) -> np.ndarray:
    rng = np.random.default_rng(len(name))
    if name == "30s":
        t = np.arange(30 * SR) / SR
        return (0.3 * np.sin(2 * np.pi * (100 + 60 * t) * t) + 0.05 * rng.normal(size=t.size)).astype(np.float32)
    if name == "0.05s":
        return (0.5 * rng.normal(size=800)).astype(np.float32)
    if name == "silence":
        return np.zeros(2 * SR, np.float32)
    if name == "square":
        t = np.arange(2 * SR) / SR
        return np.where(np.sin(2 * np.pi * 330 * t) >= 0, 1.0, -1.0).astype(np.float32)
    if name == "clipped":
        t = np.arange(SR) / SR
        return np.clip(4.0 * np.sin(2 * np.pi * 200 * t), -1, 1).astype(np.float32)
    if name == "over_range":  # int16-scale values passed as float: the extractor takes them as they are
        t = np.arange(SR) / SR
        return (30000.0 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)
    if name == "denormal":
        return (rng.normal(size=SR) * 1e-40).astype(np.float32)
    raise ValueError(name)


CASES = ["30s", "0.05s", "silence", "square", "clipped", "over_range", "denormal"]


@pytest.fixture(scope="module")
def cpu_soft(load_model):
    model = load_model("e2b")
    return {c: model.encode_audio((case(c), SR), max_audio_s=30) for c in CASES}


@pytest.mark.parametrize("device", mb.devices())
@pytest.mark.parametrize("name", CASES)
def test_hard_audio_stays_finite(load_model, cpu_soft, name, device):
    x = case(name)
    if name == "denormal":
        assert (np.abs(x) < np.finfo(np.float32).tiny).mean() > 0.99 and x.any()
    model = load_model("e2b", device=device)
    soft = model.encode_audio((x, SR))
    from markbase.preprocess.audio import audio_tokens

    assert soft.shape == (audio_tokens(len(x)), model.config.text_config.hidden_size)
    assert np.isfinite(soft).all(), f"{name} on {device}"
    ref = cpu_soft[name]
    assert np.max(np.abs(soft - ref)) <= 1e-5 * np.max(np.abs(ref)), f"{name}: {device} vs cpu"
    bf16 = load_model("e2b", dtype="bf16", device=device).encode_audio((x, SR))
    assert np.isfinite(bf16).all()


def test_features_of_silence_and_denormals_sit_at_the_log_floor():
    from markbase.preprocess.audio import log_mel

    for name in ("silence", "denormal"):
        f, valid = log_mel(case(name))
        np.testing.assert_allclose(f[:valid], np.log(1e-3), rtol=1e-6)


def planted(oracle, tmp_path, name):
    import os
    import shutil

    from safetensors.numpy import load_file, save_file

    src = os.path.join(oracle["e2b"], "f32")
    dst = str(tmp_path / "e2b-audio-nan")
    shutil.copytree(src, dst)
    tensors = load_file(os.path.join(src, "model.safetensors"))
    w = tensors[name].copy()
    w.reshape(-1)[w.size // 2] = np.nan
    tensors[name] = w
    save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    return dst


@pytest.mark.parametrize("device", mb.devices())
def test_a_nan_weight_in_the_audio_tower_is_reported(oracle, tmp_path, monkeypatch, device):
    """Without checks the soft tokens are scanned (NumericsError, never NaN handed back); with
    MARKBASE_CHECK_FINITE=1 the tracer names the layer, the op and the weight."""
    name = "model.audio_tower.layers.1.feed_forward1.ffw_layer_2.linear.weight"
    d = planted(oracle, tmp_path, name)
    with pytest.raises(mb.NumericsError, match="NaN/Inf soft tokens"):
        mb.load(d, device=device).encode_audio((case("square"), SR))
    monkeypatch.setenv("MARKBASE_CHECK_FINITE", "1")
    with pytest.raises(mb.NumericsError, match=rf"layer 1, a_kqv_out \(op linear, backend {device}\)") as e:
        mb.load(d, device=device).encode_audio((case("square"), SR))
    assert name in str(e.value)


def test_non_finite_features_are_input_errors(load_model):
    model = load_model("e2b")
    f = np.zeros((40, 128), np.float32)
    f[7, 3] = np.inf
    with pytest.raises(mb.InputError, match=r"features\[7, 3\] = inf"):
        model._core.encode_audio(f, 40)
    with pytest.raises(mb.InputError, match="valid_frames = 0"):
        model._core.encode_audio(np.zeros((4, 128), np.float32), 0)
    with pytest.raises(mb.InputError, match="mel bins"):
        model._core.encode_audio(np.zeros((4, 80), np.float32), 4)
