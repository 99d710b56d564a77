"""The decoder's embeddings entry against transformers 5.23.0 on all five oracle families:

- placeholder ids (image / video / audio) in a plain text prompt are embedded as the pad id, in the main
  embedding and in the per-layer (PLE) lookup, as transformers does (spec §2.0);
- soft tokens written over the placeholder rows of `model.embed(ids)` and run with
  `Session.prefill_embeddings` give transformers' logits for the same soft tokens (given to it as
  `mm_encoder_outputs`), with bidirectional image / video blocks on the "vision" families (26B, 31B, 12B)
  kept in the KV cache so later decode steps stay exact, also when a block is longer than a prefill chunk.

Tolerance as the text oracle (tests/oracle/policy.py): f32 checkpoints against transformers in float64, within
3× transformers-f32's own error and never above 2e-5.
"""

import os

import numpy as np
import pytest

import markbase as mb
from oracle.families import FAMILIES, MM_EXTRA
from oracle.policy import assert_f32_exact, rel_err

DEVICES = mb.devices()
BIDIRECTIONAL = {"26b", "31b", "12b"}  # use_bidirectional_attention == "vision"


def reference(oracle, family):
    return np.load(os.path.join(oracle[family], "reference.npz"))


def exact(got, ref, key, rows=slice(None)):
    return assert_f32_exact(got, ref[key][rows], ref[f"{key}_f64"][rows], key)


def block_ids(types: np.ndarray) -> np.ndarray:
    """One id per maximal run of image (1) / video (2) tokens, -1 elsewhere (transformers' block rule)."""
    out = np.full(len(types), -1, np.int32)
    block = -1
    for t in range(len(types)):
        if types[t] in (1, 2):
            if t == 0 or types[t - 1] not in (1, 2):
                block += 1
            out[t] = block
    return out


def merged_embeddings(model, ref, n):
    ids = ref["mm_ids"][:n]
    x = model.embed(ids)
    cfg = model.config
    x[ids == cfg.image_token_id] = ref["mm_image"]
    x[ids == cfg.video_token_id] = ref["mm_video"]
    return ids, x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES)
def test_placeholder_ids_in_text_match_transformers(oracle, load_model, family, device):
    ref = reference(oracle, family)
    model = load_model(family, device=device)
    ids = ref["ph_ids"]
    assert np.isin(model.config.placeholder_token_ids, ids).all()
    exact(model.logits(ids), ref, "ph_logits")


def test_embed_looks_placeholders_up_as_pad(oracle, load_model):
    model = load_model("e2b")
    cfg = model.config
    x = model.embed([cfg.image_token_id, cfg.video_token_id, cfg.audio_token_id, cfg.text_config.pad_token_id, 7])
    np.testing.assert_array_equal(x[:3], np.repeat(x[3:4], 3, axis=0))
    assert not np.array_equal(x[4], x[3])


@pytest.mark.parametrize("chunk", [256, 5])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES)
def test_soft_tokens_then_decode_match_transformers(oracle, load_model, family, device, chunk):
    ref = reference(oracle, family)
    model = load_model(family, device=device, prefill_chunk=chunk)
    n = len(ref["mm_ids"]) - MM_EXTRA
    ids, x = merged_embeddings(model, ref, n)
    blocks = block_ids(ref["mm_types"][:n])
    assert blocks.max() == 2 and (blocks == 0).sum() == 12  # the first image: longer than a 5-token chunk
    sess = model.session()
    rows = [sess.prefill_embeddings(x, ids, blocks, all_logits=True)]
    for t in ref["mm_ids"][n:]:
        rows.append(sess.decode(int(t))[None])
    exact(np.concatenate(rows), ref, "mm_logits")


@pytest.mark.parametrize("family", FAMILIES)
def test_bidirectional_blocks_matter_only_on_vision_families(oracle, load_model, family):
    """Without block ids the 'vision' families must miss the reference (so the test above can fail)."""
    ref = reference(oracle, family)
    model = load_model(family)
    n = len(ref["mm_ids"]) - MM_EXTRA
    ids, x = merged_embeddings(model, ref, n)
    causal = model.session().prefill_embeddings(x, ids, None, all_logits=True)
    if family in BIDIRECTIONAL:
        assert rel_err(causal, ref["mm_logits_f64"][:n]) > 1e-3
    else:
        exact(causal, ref, "mm_logits", slice(0, n))


def test_embeddings_are_checked(oracle, load_model):
    model = load_model("e2b")
    sess = model.session()
    with pytest.raises(mb.InputError, match="embeddings must be f32"):
        sess.prefill_embeddings(np.zeros((3, 5), np.float32), [2, 3, 4])
    with pytest.raises(mb.InputError, match="block_ids"):
        sess.prefill_embeddings(model.embed([2, 3, 4]), [2, 3, 4], block_ids=[0, 0])
