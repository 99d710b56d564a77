"""Images, video and audio through generate / chat / Chat.send on synthetic checkpoints with the test tokenizer:
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


# ------------------------------------------------------------------------------------------------- audio

SR = 16000
TONE = (0.5 * np.sin(2 * np.pi * 440 * np.arange(int(1.2 * SR)) / SR)).astype(np.float32)
CHIRP = (0.5 * np.sin(2 * np.pi * (100 + 1500 * np.arange(SR) / SR) * np.arange(SR) / SR)).astype(np.float32)


def wav_bytes(x, rate=SR):
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, x, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


@pytest.mark.parametrize("family", ["e2b", "e4b", "12b"])
def test_generate_with_audio_and_an_image_equals_the_ids_route(synth_model, family):
    model = synth_model(family)
    msgs = [{"role": "user", "content": [{"type": "audio", "audio": wav_bytes(TONE)}, {"type": "image", "image": IMG_A},
                                         {"type": "text", "text": "Transcribe this."}]}]
    result = model.generate(msgs, max_new_tokens=5, temperature=0.0)
    assert result.media == ["audio", "image"]
    cfg = model.config
    ids = model.encode_prompt(msgs)
    n_audio = result.soft_tokens[0]
    assert n_audio == (30 if family == "12b" else 30)  # 1.2 s: 25 tokens/s (4 mel frames or one 640-sample frame)
    assert ids.count(cfg.audio_token_id) == n_audio
    assert ids.count(cfg.boa_token_id) == 1 and ids.count(cfg.eoa_token_index) == 1
    assert model.tokenizer.decode(ids).count("<|audio>") == 1
    sess = model.session()
    logits = sess.prefill(ids, audio=[wav_bytes(TONE)], images=[IMG_A])
    tokens = []
    for _ in range(len(result.token_ids)):
        tokens.append(int(np.argmax(logits)))
        logits = sess.decode(tokens[-1])
    assert tokens == result.token_ids
    # the clip feeds the answer: another clip of the same length gives other logits
    other = model.session().prefill(ids, audio=[(CHIRP[:len(TONE)] if len(CHIRP) >= len(TONE) else
                                                 np.resize(CHIRP, len(TONE)), SR)], images=[IMG_A])
    assert not np.allclose(other, model.session().prefill(ids, audio=[(TONE, SR)], images=[IMG_A]))


def test_audio_in_turn_two_reuses_turn_ones_cache(synth_model):
    model = synth_model("e2b")
    chat = model.new_chat(temperature=0.0, max_new_tokens=4)
    chat.send("Hello there.")
    answer = chat.send([{"type": "audio", "audio": (TONE, SR)}, {"type": "text", "text": "What is this sound?"}])
    assert chat.last.media == ["audio"]
    assert chat.last.prompt_tokens - chat.last.prefill_tokens > 10  # turn one came from the cache
    fresh = model.generate(chat.messages[:-1], temperature=0.0, max_new_tokens=4)
    assert answer == fresh.text
    # a third turn: the first clip is neither prefilled nor encoded again
    chat.send([{"type": "audio", "audio": (CHIRP, SR)}, {"type": "text", "text": "And this one?"}])
    assert chat.last.media == ["audio", "audio"] and chat.last.prefill_tokens < chat.last.prompt_tokens


def test_encode_audio_shapes_and_sources(synth_model, tmp_path):
    model = synth_model("e2b")
    path = tmp_path / "tone.flac"
    import soundfile as sf

    sf.write(path, TONE, SR, format="FLAC")
    a = model.encode_audio(str(path))
    assert a.shape == (30, model.config.text_config.hidden_size) and a.dtype == np.float32
    decoded, rate = sf.read(path, dtype="float32")  # the 16-bit samples the file holds
    np.testing.assert_array_equal(model.encode_audio(decoded, sample_rate=rate), a)
    assert not np.allclose(model.encode_audio(CHIRP, sample_rate=SR)[:25], a[:25])
    # 44.1 kHz stereo int16 input: resampled and mixed down to the same ~1.2 s clip
    t = np.arange(int(1.2 * 44100)) / 44100
    stereo = (np.stack([np.sin(2 * np.pi * 440 * t)] * 2, 1) * 16000).astype(np.int16)
    assert model.encode_audio((stereo, 44100)).shape[0] == 30


def test_audio_the_checkpoint_cannot_take(synth_model):
    model = synth_model("26b")
    with pytest.raises(mb.InputError, match="no audio input"):
        model.generate([{"role": "user", "content": [{"type": "audio", "audio": (TONE, SR)}]}], max_new_tokens=2)
    with pytest.raises(mb.InputError, match="has no audio encoder"):
        model.encode_audio((TONE, SR))
    with pytest.raises(mb.InputError, match="has no audio encoder"):
        model.logits([2, 3], audio=[(TONE, SR)])


def test_bad_audio_in_a_message_names_the_part(synth_model):
    model = synth_model("e2b")
    msgs = [{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "audio", "audio": b"garbage!" * 10}]}]
    with pytest.raises(mb.InputError, match=r"messages\[0\]\.content\[1\]: cannot decode"):
        model.generate(msgs, max_new_tokens=2)
    with pytest.raises(mb.InputError, match="needs its source"):
        model.generate([{"role": "user", "content": [{"type": "audio"}]}], max_new_tokens=2)
    with pytest.raises(mb.InputError, match="sample_rate"):
        model.generate([{"role": "user", "content": [{"type": "audio", "audio": TONE, "sample_rate": "fast"}]}],
                       max_new_tokens=2)
    with pytest.raises(mb.InputError, match="longer than max_audio_s"):
        model.encode_audio((np.zeros(31 * SR, np.float32), SR))
