"""Images and video against transformers 5.23.0 on the five tiny oracle families (vision towers with every
norm, clip bound, std buffer and scale perturbed; the 12B's patch embedder), on cpu and metal-sim.

Tolerances: soft tokens, vision-tower output and logits by the oracle policy (tests/oracle/policy.py: against
transformers in float64, within 3× its f32 run's own error, never above 2e-5); greedy tokens equal. The E2B/E4B
towers' clip bounds clip ≥ 1% of every clippable linear's inputs and outputs on these images (asserted by the
fixture builder, tests/oracle/binding.py).
"""

import json
import os

import numpy as np
import pytest

import markbase as mb
from oracle.policy import assert_f32_exact
from oracle.families import FAMILIES, VISION_TOWERS
from oracle.vision import BUDGET, GREEDY, build, images, processed, video

DEVICES = mb.devices()
# Encoder-alone cases: every family on the CPU, one family per distinct tower config elsewhere (families.py).
TOWER_CASES = [(f, d) for f in FAMILIES for d in DEVICES if d == "cpu" or f in VISION_TOWERS]


@pytest.fixture(scope="module")
def vision_refs(oracle):
    return {f: np.load(build(d, f)) for f, d in oracle.items()}


def exact(got, ref, key, what=""):
    """markbase's f32 result against transformers-float64's `key`, by the oracle policy (tests/oracle/policy.py)."""
    return assert_f32_exact(got, ref[key], ref[f"{key}_f64"], f"{key} {what}")


def vision_tower_config(family_dir):
    """What fixes a vision tower's kernels and shapes: its config and the text width it projects to."""
    cfg = json.load(open(os.path.join(family_dir, "f32", "config.json")))
    return cfg["vision_config"], cfg["text_config"]["hidden_size"]


def test_metal_sim_tower_cases_cover_every_vision_config(oracle):
    """Each family's vision tower config is that of a family in VISION_TOWERS, whose encoder-alone case runs
    on metal-sim."""
    for family in FAMILIES:
        assert any(vision_tower_config(oracle[family]) == vision_tower_config(oracle[t]) for t in VISION_TOWERS), family


@pytest.mark.parametrize("family,device", TOWER_CASES)
def test_image_features_match_transformers(vision_refs, load_model, family, device):
    ref = vision_refs[family]
    model = load_model(family, device=device)
    vc = model.config.vision_config
    for i, im in enumerate(images()):
        p = processed(vc, model.config.is_unified, im)
        pooled, soft = model._core.encode_image(p.pixel_values, p.positions)
        assert soft.shape == ref[f"feat_soft_{i}"].shape
        exact(pooled, ref, f"feat_pooled_{i}")
        exact(soft, ref, f"feat_soft_{i}")
        if device == "cpu":  # the public entry (preprocessing + this encoder call) is the same on every device
            np.testing.assert_array_equal(model.encode_image(im, max_soft_tokens=BUDGET), soft)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES)
def test_logits_with_one_and_two_images(vision_refs, load_model, family, device):
    ref = vision_refs[family]
    model = load_model(family, device=device)
    ims = images()
    one = model.logits(ref["one_ids"], images=ims[:1], max_soft_tokens=BUDGET)
    exact(one, ref, "one_logits")
    two = model.logits(ref["two_ids"], images=ims, max_soft_tokens=BUDGET)
    exact(two, ref, "two_logits")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_after_two_images_matches_transformers_generate(vision_refs, load_model, family, device):
    """Decode continues after a cached prefill holding both images (bidirectional blocks on 26B/31B/12B)."""
    ref = vision_refs[family]
    sess = load_model(family, device=device).session()
    logits = sess.prefill(ref["two_ids"], images=images(), max_soft_tokens=BUDGET)
    tokens = []
    for _ in range(GREEDY):
        tokens.append(int(np.argmax(logits)))
        logits = sess.decode(tokens[-1])
    np.testing.assert_array_equal(tokens, ref["greedy"])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES)
def test_video_frames_match_transformers(vision_refs, load_model, family, device):
    ref = vision_refs[family]
    model = load_model(family, device=device)
    got = model.logits(ref["vid_ids"], videos=[video()], max_soft_tokens=BUDGET)
    exact(got, ref, "vid_logits")


@pytest.mark.parametrize("family", ["31b", "12b"])
def test_chunked_prefill_keeps_image_blocks_whole(vision_refs, load_model, family):
    """A prefill chunk shorter than an image's run: the chunk grows to hold the whole block."""
    ref = vision_refs[family]
    got = load_model(family, prefill_chunk=7).logits(ref["two_ids"], images=images(), max_soft_tokens=BUDGET)
    exact(got, ref, "two_logits")


def test_image_count_and_run_mismatches_are_input_errors(vision_refs, load_model):
    ref = vision_refs["e2b"]
    model = load_model("e2b")
    ims = images()
    with pytest.raises(mb.InputError, match="image 1: the token ids hold no placeholder run"):
        model.logits(ref["one_ids"], images=ims, max_soft_tokens=BUDGET)
    with pytest.raises(mb.InputError, match="placeholder run.* no image fills"):
        model.logits(ref["two_ids"], images=ims[:1], max_soft_tokens=BUDGET)
    with pytest.raises(mb.InputError, match="placeholder run at position .* has .* tokens"):
        model.logits(ref["one_ids"], images=ims[1:], max_soft_tokens=BUDGET)
