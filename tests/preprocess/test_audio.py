"""Audio preprocessing against transformers' feature extractors (Gemma4AudioFeatureExtractor needs only
numpy, so it runs here): log-mel features bit for bit on sines, chirps, silence, white noise, clips of
0.01 s, 1 s, 7.3 s and 30 s and batches of different lengths; the token count against the processor's
arithmetic; the 12B's waveform frames; loading from every kind of source (WAV / FLAC / OGG / MP3 files and
bytes, int and float arrays, stereo, other sample rates through soxr); bad input as InputError."""

import io

import numpy as np
import pytest
import soundfile as sf

import markbase as mb
from markbase.preprocess import audio as A

SR = 16000


def hf(batch):
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

    out = Gemma4AudioFeatureExtractor()(list(batch), return_tensors="np")
    return out["input_features"], out["input_features_mask"]


def signal(kind: str, seconds: float, seed: int = 0) -> np.ndarray:
    n = int(round(seconds * SR))
    t = np.arange(n) / SR
    rng = np.random.default_rng(seed)
    if kind == "sine":
        return (0.5 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)
    if kind == "chirp":
        return (0.8 * np.sin(2 * np.pi * (50 * t + 3950 * t * t / (2 * max(seconds, 1e-3))))).astype(np.float32)
    if kind == "silence":
        return np.zeros(n, np.float32)
    if kind == "noise":
        return rng.uniform(-1, 1, n).astype(np.float32)
    raise ValueError(kind)


@pytest.mark.parametrize("seconds", [0.01, 1.0, 7.3, 30.0])
@pytest.mark.parametrize("kind", ["sine", "chirp", "silence", "noise"])
def test_log_mel_equals_the_extractor(kind, seconds):
    x = signal(kind, seconds, seed=int(seconds * 10))
    want, mask = hf([x])
    got, valid = A.log_mel(x)
    np.testing.assert_array_equal(got, want[0])
    assert valid == int(mask[0].sum()) == A.valid_mel_frames(len(x))
    assert mask[0][:valid].all()


def test_batches_of_different_lengths():
    # The extractor pads a batch to its longest clip: each clip's own frames are its rows of the batch,
    # the rest of its rows are zeros with a false mask.
    clips = [signal("chirp", 1.3), signal("noise", 0.37, 1), signal("sine", 2.05), signal("silence", 0.2)]
    feats, masks = hf(clips)
    for x, f, m in zip(clips, feats, masks):
        got, valid = A.log_mel(x)
        np.testing.assert_array_equal(got, f[:len(got)])
        assert not f[len(got):].any() and not m[valid:].any() and m[:valid].all()


@pytest.mark.parametrize("n", [161, 300, 799, 800, 16000, 16001, 70400, 37920, 480000])
def test_token_count_matches_the_processor(n):
    from transformers.models.gemma4.processing_gemma4 import Gemma4Processor

    _, mask = hf([np.ones(n, np.float32)])
    t = len(mask[0])
    m = mask[0]
    for _ in range(2):
        m = m[::2][:(t + 2 - 3) // 2 + 1]
        t = len(m)
    assert A.audio_tokens(n) == int(m.sum())
    # the processor's own sample-count formula (used by vLLM) agrees whenever the clip needs no padding
    if n % 128 == 0:
        proc = Gemma4Processor.__new__(Gemma4Processor)
        proc.feature_extractor = type("FE", (), {"frame_length": 320, "hop_length": 160})()
        proc.audio_seq_length = 10 ** 6
        assert A.audio_tokens(n) == proc._compute_audio_num_tokens(np.zeros(n), SR)


@pytest.mark.parametrize("n", [1, 639, 640, 641, 16000, 12345])
def test_waveform_frames_equal_the_unified_extractor(n):
    from transformers.models.gemma4_unified.feature_extraction_gemma4_unified import Gemma4UnifiedAudioFeatureExtractor

    x = signal("noise", n / SR, seed=n)[:n]
    want = Gemma4UnifiedAudioFeatureExtractor()([x], return_tensors="np")["input_features"][0]
    np.testing.assert_array_equal(A.waveform_frames(x), want)
    p = A.process_audio((x, SR), unified=True, unified_frame=640)
    assert p.num_soft_tokens == p.valid_frames == len(want) == -(-n // 640)


# ---------------------------------------------------------------------------------------------- loading

@pytest.mark.parametrize("fmt,subtype,tol", [("WAV", "PCM_16", 1 / 32768), ("WAV", "FLOAT", 0), ("FLAC", "PCM_16", 1 / 32768),
                                             ("OGG", "VORBIS", None), ("MP3", "MPEG_LAYER_III", None)])
def test_files_and_bytes(tmp_path, fmt, subtype, tol):
    x = signal("chirp", 1.0)
    path = tmp_path / f"clip.{fmt.lower()}"
    sf.write(path, x, SR, format=fmt, subtype=subtype)
    from_path = A.load_audio(str(path))
    from_bytes = A.load_audio(path.read_bytes())
    np.testing.assert_array_equal(from_path, from_bytes)
    assert from_path.dtype == np.float32
    if tol is not None:  # lossless: the samples back within the format's quantisation
        assert len(from_path) == len(x) and np.abs(from_path - x).max() <= tol
    else:  # lossy: a decoder delay may shift the clip; the same tone comes back at about the same length
        assert abs(len(from_path) - len(x)) < 0.1 * SR
        spec = np.abs(np.fft.rfft(from_path[:8000]))
        assert spec.argmax() * SR / 8000 < 2500  # the chirp's first half, not noise


def test_int_arrays_scale_like_decoders():
    x16 = (signal("sine", 0.5) * 32767).astype(np.int16)
    np.testing.assert_array_equal(A.load_audio(x16, sample_rate=SR), x16.astype(np.float32) / 32768)
    x32 = x16.astype(np.int32) << 16
    np.testing.assert_allclose(A.load_audio(x32, sample_rate=SR), x16.astype(np.float32) / 32768, rtol=0, atol=1e-9)
    u8 = np.array([0, 128, 255], np.uint8)
    np.testing.assert_array_equal(A.load_audio(u8, sample_rate=SR), [-1.0, 0.0, 127 / 128])
    # a 16-bit WAV decodes to the same floats as the int16 array
    buf = io.BytesIO()
    sf.write(buf, x16, SR, format="WAV", subtype="PCM_16")
    np.testing.assert_array_equal(A.load_audio(buf.getvalue()), A.load_audio((x16, SR)))


def test_stereo_is_averaged_in_either_layout():
    left, right = signal("sine", 0.3), signal("noise", 0.3)
    want = ((left + right) / 2).astype(np.float32)
    np.testing.assert_allclose(A.load_audio(np.stack([left, right], 1), sample_rate=SR), want, atol=1e-7)
    np.testing.assert_allclose(A.load_audio(np.stack([left, right], 0), sample_rate=SR), want, atol=1e-7)


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000])
def test_other_rates_are_resampled_as_transformers_load_audio(tmp_path, rate):
    from transformers.audio_utils import load_audio

    t = np.arange(int(rate * 0.8) + 7) / rate
    x = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    stereo = np.stack([x, 0.5 * x], 1)
    path = tmp_path / "clip.wav"
    sf.write(path, stereo, rate, subtype="FLOAT")
    got = A.load_audio(str(path))
    np.testing.assert_array_equal(got, load_audio(str(path), sampling_rate=SR))  # soundfile + soxr_hq, bit for bit
    np.testing.assert_array_equal(A.load_audio((stereo, rate)), got)
    assert len(got) == -(-len(x) * SR // rate)
    # and the tone is still 440 Hz
    spec = np.abs(np.fft.rfft(got[:SR // 2]))
    assert abs(spec.argmax() * 2 - 440) <= 2


@pytest.mark.parametrize("src,kw,match", [
    (b"", {}, "empty"),
    (b"RIFF\x00\x00\x00\x00WAVEjunkjunkjunk", {}, "cannot decode"),
    (b"\x00\x01\x02" * 100, {}, "cannot decode"),
    ("/nonexistent/clip.wav", {}, "no such file"),
    (np.zeros(100, np.float32), {}, "needs its sample_rate"),
    (np.zeros(100, np.float32), {"sample_rate": "16k"}, "sample_rate must be a number"),
    (np.zeros(100, np.float32), {"sample_rate": 16000.5}, "whole number"),
    (np.zeros(100, np.float32), {"sample_rate": 0}, "whole number"),
    (np.zeros(100, np.float32), {"sample_rate": True}, "sample_rate must be a number"),
    (np.array([0.0, np.nan], np.float32), {"sample_rate": SR}, "sample 1 is not finite"),
    (np.zeros(100, np.complex64), {"sample_rate": SR}, "dtype complex64"),
    (np.zeros((2, 3, 4), np.float32), {"sample_rate": SR}, "shape"),
    (np.zeros(0, np.float32), {"sample_rate": SR}, "no samples"),
    (42, {}, "got int"),
    ((np.zeros(10), 16000, 1), {}, "tuple"),
])
def test_bad_sources(src, kw, match):
    with pytest.raises(mb.InputError, match=match):
        A.load_audio(src, **kw)


def test_length_limits():
    with pytest.raises(mb.InputError, match=r"30\.50 s, longer than max_audio_s = 30"):
        A.process_audio((np.zeros(int(30.5 * SR), np.float32), SR))
    p = A.process_audio((np.zeros(int(30.5 * SR), np.float32), SR), max_audio_s=31)
    assert p.num_soft_tokens == A.audio_tokens(int(30.5 * SR)) == 763
    assert A.process_audio((np.zeros(30 * SR, np.float32), SR)).num_soft_tokens == 750
    with pytest.raises(mb.InputError, match="too short"):
        A.process_audio((np.zeros(160, np.float32), SR))
    with pytest.raises(mb.InputError, match="max_audio_s must be > 0"):
        A.process_audio((np.zeros(1600, np.float32), SR), max_audio_s=0)


def test_audio_expansion_equals_the_processor():
    """`<|audio|>` → `<|audio>` + n × `<|audio|>` + `<audio|>` with n from the processor's mask arithmetic,
    next to an image in the same text."""
    import types

    from transformers.models.gemma4.processing_gemma4 import Gemma4Processor

    from markbase.media import MediaItem, expand
    from markbase.preprocess import process_image

    tokens = {"image": "<|image|>", "video": "<|video|>", "audio": "<|audio|>", "boi": "<|image>", "eoi": "<image|>",
              "boa": "<|audio>", "eoa": "<audio|>"}
    x = signal("chirp", 2.37)
    clip = A.process_audio((x, SR))
    item = MediaItem("audio", [], audio=clip)
    image = MediaItem("image", [process_image(np.zeros((48, 64, 3), np.uint8), max_soft_tokens=70)])
    ours = expand("a <|audio|> b <|image|> c", [item, image], tokens)
    fake = types.SimpleNamespace(boa_token=tokens["boa"], eoa_token=tokens["eoa"], audio_token=tokens["audio"])
    _, mask = hf([x])
    want = Gemma4Processor.replace_audio_token(fake, {"input_features_mask": mask}, 0)
    assert ours.startswith("a " + want + " b <|image>") and want.count("<|audio|>") == clip.num_soft_tokens == 59
    with pytest.raises(mb.InputError, match="1 <\\|audio\\|> placeholder\\(s\\) but 2 audio"):
        expand("<|audio|>", [item, item], tokens)
