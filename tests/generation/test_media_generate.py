"""Images and video through generate / chat / Chat.send on synthetic checkpoints with the test tokenizer:
placeholder expansion, the same tokens as the ids-level route, cache reuse when an image arrives in a
later turn, per-modality timings, and the errors for media a checkpoint cannot take."""

import io

import numpy as np
import pytest

import markbase as mb

RNG = np.random.default_rng(42)
IMG_A = RNG.integers(0, 256, (120, 160, 3), dtype=np.uint8)
IMG_B = RNG.integers(0, 256, (200, 90, 3), dtype=np.uint8)


def user(*parts):
    content = [{"type": "image", "image": p} if isinstance(p, np.ndarray) else {"type": "text", "text": p} for p in parts]
    return [{"role": "user", "content": content}]


@pytest.mark.parametrize("family", ["e2b", "26b", "12b"])
def test_generate_with_images_equals_the_ids_route(synth_model, family):
    model = synth_model(family)
    msgs = user(IMG_A, "Compare", IMG_B, "please.")
    result = model.generate(msgs, max_new_tokens=6, temperature=0.0)
    assert result.media == ["image", "image"] and len(result.soft_tokens) == 2
    assert result.preprocess_s > 0 and result.encode_s >= 0
    ids = model.encode_prompt(msgs)
    cfg = model.config
    assert ids.count(cfg.image_token_id) == sum(result.soft_tokens)
    assert ids.count(cfg.boi_token_id) == 2 and ids.count(cfg.eoi_token_id) == 2
    sess = model.session()
    logits = sess.prefill(ids, images=[IMG_A, IMG_B])
    tokens = []
    for _ in range(len(result.token_ids)):
        tokens.append(int(np.argmax(logits)))
        logits = sess.decode(tokens[-1])
    assert tokens == result.token_ids
    # The image changes the answer's inputs: a different image gives different logits.
    other = model.session().prefill(ids, images=[IMG_A, 255 - IMG_B])
    assert not np.allclose(other, model.session().prefill(ids, images=[IMG_A, IMG_B]))


def test_an_image_in_turn_two_reuses_turn_ones_cache(synth_model):
    model = synth_model("31b")
    chat = model.new_chat(temperature=0.0, max_new_tokens=4)
    chat.send("Hello there.")
    answer = chat.send([{"type": "image", "image": IMG_A}, {"type": "text", "text": "And this?"}])
    reused = chat.last.prompt_tokens - chat.last.prefill_tokens
    # As much of turn 1 is reused as when turn 2 is text only (the template decides where they diverge).
    text_chat = model.new_chat(temperature=0.0, max_new_tokens=4)
    text_chat.send("Hello there.")
    text_chat.send("And this?")
    assert reused == text_chat.last.prompt_tokens - text_chat.last.prefill_tokens > 10
    fresh = model.generate(chat.messages[:-1], temperature=0.0, max_new_tokens=4)
    assert answer == fresh.text
    # A third turn with another image: the first image is neither prefilled nor encoded again.
    chat.send([{"type": "image", "image": IMG_B}, {"type": "text", "text": "And now?"}])
    assert chat.last.media == ["image", "image"] and chat.last.prefill_tokens < chat.last.prompt_tokens


def test_same_ids_different_image_is_not_reused(synth_model):
    """Two images of one size give the same placeholder ids: the cache is keyed by content, not ids."""
    model = synth_model("e2b")
    chat = model.new_chat(temperature=0.0, max_new_tokens=3)
    chat.send([{"type": "image", "image": IMG_A}, {"type": "text", "text": "What?"}])
    chat.reset()
    other = (IMG_A.astype(np.int32) * 7 % 256).astype(np.uint8)
    got = chat.send([{"type": "image", "image": other}, {"type": "text", "text": "What?"}])
    fresh = model.generate(user(other, "What?"), temperature=0.0, max_new_tokens=3)
    assert got == fresh.text


def test_video_part(synth_model):
    model = synth_model("e4b")
    frames = np.stack([IMG_A // (i + 1) for i in range(5)])
    msgs = [{"role": "user", "content": [{"type": "video", "video": frames, "num_frames": 3},
                                         {"type": "text", "text": "What happens?"}]}]
    result = model.generate(msgs, max_new_tokens=3, temperature=0.0)
    assert result.media == ["video"]
    ids = model.encode_prompt(msgs)
    text = model.tokenizer.decode(ids)
    assert text.count("<|image>") == 3 and "00:00 <|image>" in text
    soft = model.encode_video(frames, num_frames=3)
    assert soft.shape == (result.soft_tokens[0], model.config.text_config.hidden_size)


def test_media_the_checkpoint_cannot_take(synthetic, tmp_path):
    from markbase.testing import make_checkpoint

    d = make_checkpoint(tmp_path / "text", family="e2b", size="tiny", text_only=True)
    model = mb.load(d)
    with pytest.raises(mb.InputError, match="no image input"):
        model.generate(user(IMG_A, "hi"), max_new_tokens=2)
    with pytest.raises(mb.InputError, match="no vision encoder"):
        model.encode_image(IMG_A)


def test_bad_image_in_a_message_names_the_part(synth_model):
    model = synth_model("e2b")
    msgs = [{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image", "image": b"garbage"}]}]
    with pytest.raises(mb.InputError, match=r"messages\[0\]\.content\[1\]: not an image"):
        model.generate(msgs, max_new_tokens=2)
    with pytest.raises(mb.InputError, match="needs its source"):
        model.generate([{"role": "user", "content": [{"type": "image"}]}], max_new_tokens=2)
