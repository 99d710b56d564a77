"""Audio against transformers 5.23.0 on the tiny oracle checkpoints: the E2B- and E4B-like conformer towers
(every norm, clip bound and per_dim_scale perturbed) and the 12B-like waveform embedder, on cpu and metal-sim.

Tolerances: features bit-equal to the extractor's (same numpy operations); tower output, soft tokens and
logits by the oracle policy (tests/oracle/policy.py: against transformers in float64, within 3× its f32 run's
own error, never above 2e-5); greedy tokens equal. The towers' clip bounds clip ≥ 1% of every clippable
linear's inputs and outputs on these clips (asserted by the fixture builder, tests/oracle/binding.py).
"""

import json
import os

import numpy as np
import pytest

import markbase as mb
from oracle.policy import assert_f32_exact, rel_err
from oracle.audio import GREEDY, SR, build, clip_lengths, clips, pair
from oracle.families import AUDIO_TOWERS
from oracle.vision import BUDGET, images

DEVICES = mb.devices()
AUDIO_FAMILIES = ["e2b", "e4b", "12b"]
# Encoder-alone cases: every family on the CPU, one family per distinct tower config elsewhere (families.py).
TOWER_CASES = [(f, d) for f in AUDIO_FAMILIES for d in DEVICES if d == "cpu" or f in AUDIO_TOWERS]


@pytest.fixture(scope="module")
def audio_refs(oracle):
    return {f: np.load(build(oracle[f], f)) for f in AUDIO_FAMILIES}


def exact(got, ref, key, what=""):
    """markbase's f32 result against transformers-float64's `key`, by the oracle policy (tests/oracle/policy.py)."""
    return assert_f32_exact(got, ref[key], ref[f"{key}_f64"], f"{key} {what}")


@pytest.mark.parametrize("family", AUDIO_FAMILIES)
def test_features_equal_the_extractor(audio_refs, load_model, family):
    ref = audio_refs[family]
    media = load_model(family).media
    for i, samples in enumerate(clips(family)):
        item = media.audio(samples, sample_rate=SR)
        want, mask = ref[f"fe_{i}"], ref[f"fe_mask_{i}"]
        np.testing.assert_array_equal(item.audio.features, want)
        assert item.audio.valid_frames == int(mask.sum()) and mask[:item.audio.valid_frames].all()


def test_metal_sim_tower_cases_cover_every_audio_config(oracle):
    """Each family's audio tower config (and clips) is that of a family in AUDIO_TOWERS, whose encoder-alone case
    runs on metal-sim."""
    def tower(family):
        cfg = json.load(open(os.path.join(oracle[family], "f32", "config.json")))
        return cfg["audio_config"], cfg["text_config"]["hidden_size"], clip_lengths(family)

    for family in AUDIO_FAMILIES:
        assert any(tower(family) == tower(t) for t in AUDIO_TOWERS), family


@pytest.mark.parametrize("family,device", TOWER_CASES)
def test_audio_features_match_get_audio_features(audio_refs, load_model, family, device):
    """Clips of 1 s, 4.4 s, 2.37 s (59 tokens: not a multiple of the 12-token chunk) and 1.93 s (48)."""
    ref = audio_refs[family]
    model = load_model(family, device=device)
    for i, samples in enumerate(clips(family)):
        hidden, soft = model._core.encode_audio(ref[f"fe_{i}"], int(ref[f"fe_mask_{i}"].sum()))
        assert soft.shape == ref[f"soft_{i}"].shape, f"clip {i}"
        exact(soft, ref, f"soft_{i}", f"clip {i}")
        if family != "12b":
            exact(hidden, ref, f"hid_{i}", f"clip {i}")
        np.testing.assert_array_equal(model.encode_audio((samples, SR)), soft)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", AUDIO_FAMILIES)
def test_logits_with_two_clips_and_with_image_and_audio(audio_refs, load_model, family, device):
    ref = audio_refs[family]
    model = load_model(family, device=device)
    cs = [(c, SR) for c in clips(family)]
    got = model.logits(ref["aud_ids"], audio=[cs[i] for i in pair(family)])
    exact(got, ref, "aud_logits")
    got = model.logits(ref["mix_ids"], images=images()[:1], audio=[cs[1]], max_soft_tokens=BUDGET)
    exact(got, ref, "mix_logits")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", AUDIO_FAMILIES)
def test_greedy_after_audio_matches_transformers_generate(audio_refs, load_model, family, device):
    ref = audio_refs[family]
    cs = [(c, SR) for c in clips(family)]
    sess = load_model(family, device=device).session()
    logits = sess.prefill(ref["aud_ids"], audio=[cs[i] for i in pair(family)])
    tokens = []
    for _ in range(GREEDY):
        tokens.append(int(np.argmax(logits)))
        logits = sess.decode(tokens[-1])
    np.testing.assert_array_equal(tokens, ref["greedy"])


def test_bf16_checkpoint_is_close(audio_refs, load_model):
    """The bf16 copy of the E2B-like checkpoint: weights rounded, activations f32 — soft tokens stay within
    bf16 weight rounding (~1e-2 relative) of the f32 reference, and finite."""
    ref = audio_refs["e2b"]
    soft = load_model("e2b", dtype="bf16")._core.encode_audio(ref["fe_1"], int(ref["fe_mask_1"].sum()))[1]
    assert np.isfinite(soft).all()
    assert rel_err(soft, ref["soft_1"]) <= 5e-2


def test_audio_count_and_run_mismatches_are_input_errors(audio_refs, load_model):
    ref = audio_refs["e2b"]
    model = load_model("e2b")
    cs = [(c, SR) for c in clips("e2b")]
    with pytest.raises(mb.InputError, match="placeholder run.* no audio fills"):
        model.logits(ref["aud_ids"], audio=[cs[0]])
    with pytest.raises(mb.InputError, match="placeholder run at position .* has .* tokens"):
        model.logits(ref["aud_ids"], audio=[cs[1], cs[2]])
    assert len(clip_lengths("e2b")) == 4
