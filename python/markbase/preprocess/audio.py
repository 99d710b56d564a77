"""Audio → model inputs, as transformers' Gemma 4 feature extractors make them (spec §4.1, §5.3).

`load_audio(src, sample_rate=None)` accepts a path, `bytes`, a `data:` / `http(s)://` URL, a numpy array
with its `sample_rate`, or an `(array, sample_rate)` pair, and returns mono float32 samples at 16 kHz:
- files are decoded by libsndfile (the `soundfile` wheels ship it): WAV, FLAC, OGG/Vorbis, OGG/Opus,
  MP3, AIFF and the other formats libsndfile reads; samples come out as float in [-1, 1];
- integer arrays are scaled to [-1, 1] as decoders do (int16 / 32768, int32 / 2^31, int8 / 128,
  uint8 (x − 128) / 128); float arrays are taken as they are (they must be finite);
- channels are averaged to mono; 2-D arrays are [samples, channels] (soundfile's layout), or
  [channels, samples] when the first dimension is at most 8 and the second longer;
- other rates are resampled to 16 kHz by libsoxr at its "HQ" setting (`soxr`) and padded / trimmed to
  ceil(N · 16000 / rate) samples: the steps of transformers' `load_audio` (soundfile backend) and of
  `librosa.load`, so a file gives the model the samples transformers would.

`log_mel(samples)` is `Gemma4AudioFeatureExtractor` for one clip (E2B/E4B): the same numpy operations in
the same precision, so the features are bit-identical. `waveform_frames(samples)` is the 12B's
`Gemma4UnifiedAudioFeatureExtractor`: 640-sample frames.

Length limit: transformers silently truncates a clip to 30 s. Here a clip longer than `max_audio_s`
(default MAX_AUDIO_S = 30 s, the length the encoder was trained on) is refused with an InputError; pass a
larger `max_audio_s` to encode it whole (the conformer attends 12 tokens back, so any length runs, in
time and memory linear in the length), or split it yourself.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass

import numpy as np

from .. import args
from .._core import InputError
from ..files import is_url, read_media, shown

SAMPLE_RATE = 16_000
MAX_SAMPLE_RATE = 10_000_000  # Hz a sample array may claim
MAX_AUDIO_S = 30.0
MAX_AUDIO_BYTES = 256 << 20  # one encoded clip (file, data: URL or download)
# Gemma4AudioFeatureExtractor's constants (spec §4.1)
FRAME_LENGTH = 320          # 20 ms
HOP_LENGTH = 160            # 10 ms
FFT_LENGTH = 512            # 2^ceil(log2(320)), no overdrive
MEL_BINS = 128
MEL_FLOOR = 1e-3
PAD_TO_MULTIPLE = 128       # the batch is padded to a multiple of 128 samples
UNIFIED_FRAME = 640         # the 12B's samples per audio token (40 ms)


@dataclass
class ProcessedAudio:
    """One clip as the audio tower (or the 12B embedder) reads it."""
    features: np.ndarray    # float32: log-mel [frames, 128] (E2B/E4B) or waveform frames [n, 640] (12B)
    valid_frames: int       # leading rows that are real (the extractor's mask); all rows on the 12B
    num_soft_tokens: int    # tokens the clip becomes
    duration_s: float       # of the 16 kHz samples


def _mel_filter_bank() -> np.ndarray:
    """transformers' mel_filter_bank(257, 128, 0, 8000, 16000, norm=None, mel_scale="htk"), float64 [257, 128]."""
    hz_to_mel = lambda f: 2595.0 * np.log10(1.0 + (f / 700.0))
    mel_to_hz = lambda m: 700.0 * (np.power(10, m / 2595.0) - 1.0)
    mel_freqs = np.linspace(hz_to_mel(0.0), hz_to_mel(8000.0), MEL_BINS + 2)
    filter_freqs = mel_to_hz(mel_freqs)
    fft_freqs = np.linspace(0, SAMPLE_RATE // 2, FFT_LENGTH // 2 + 1)
    filter_diff = np.diff(filter_freqs)
    slopes = np.expand_dims(filter_freqs, 0) - np.expand_dims(fft_freqs, 1)
    down = -slopes[:, :-2] / filter_diff[:-1]
    up = slopes[:, 2:] / filter_diff[1:]
    return np.maximum(np.zeros(1), np.minimum(down, up))


MEL_FILTERS = _mel_filter_bank()
WINDOW = np.hanning(FRAME_LENGTH + 1)[:-1].astype(np.float32)  # periodic Hann


def _check_rate(sample_rate, what: str) -> int:
    if not (args.is_int(sample_rate) or isinstance(sample_rate, (float, np.floating))):
        raise InputError(f"{what}: sample_rate must be a number of Hz (an int), got {args.shown(sample_rate)}")
    if not args.is_real(sample_rate) or sample_rate != int(sample_rate) or not 1 <= sample_rate <= MAX_SAMPLE_RATE:
        raise InputError(f"{what}: sample_rate must be a whole number of Hz in [1, {MAX_SAMPLE_RATE:.0e}], got "
                         f"{args.shown(sample_rate)}")
    return int(sample_rate)


def _decode_file(data: io.BytesIO, what: str, max_audio_s: float | None = None) -> tuple[np.ndarray, int]:
    """Samples [frames, channels] and rate of an encoded clip; with max_audio_s, decoding stops one frame past
    it (a long clip in a small compressed file never decodes whole)."""
    import soundfile
    try:
        with soundfile.SoundFile(data) as f:
            rate = int(f.samplerate)
            limit = -1 if max_audio_s is None else math.ceil(max_audio_s * rate) + 1
            samples = f.read(frames=limit, dtype="float32", always_2d=True)
    except Exception as e:  # noqa: BLE001 - libsndfile reports format errors as several exception types
        raise InputError(f"{what}: cannot decode the audio ({type(e).__name__}: {e})") from None
    if max_audio_s is not None and len(samples) == limit:
        raise too_long(what, f"more than {max_audio_s:g}", max_audio_s)
    return samples, rate


def too_long(what: str, duration: str, limit: float) -> InputError:
    return InputError(f"{what}: the clip is {duration} s, longer than max_audio_s = {limit:g} s (transformers "
                      f"would silently cut it there); split it, or pass a larger max_audio_s to encode it whole")


def _as_float(arr: np.ndarray, what: str) -> np.ndarray:
    """Integer PCM → float in [-1, 1]; float → float32 (finite)."""
    if arr.dtype == np.int16:
        return arr.astype(np.float32) / np.float32(32768.0)
    if arr.dtype == np.int32:
        return (arr.astype(np.float64) / 2147483648.0).astype(np.float32)
    if arr.dtype == np.int8:
        return arr.astype(np.float32) / np.float32(128.0)
    if arr.dtype == np.uint8:
        return (arr.astype(np.float32) - np.float32(128.0)) / np.float32(128.0)
    if arr.dtype.kind == "f":
        out = arr.astype(np.float32)
        bad = ~np.isfinite(out)
        if bad.any():
            raise InputError(f"{what}: sample {int(np.flatnonzero(bad.reshape(-1))[0])} is not finite "
                             f"({out.reshape(-1)[bad.reshape(-1)][0]})")
        return out
    raise InputError(f"{what}: audio samples must be float or int8/16/32 / uint8 PCM, got dtype {arr.dtype}")


def _mono(arr: np.ndarray, what: str) -> np.ndarray:
    if arr.ndim == 1:
        return arr
    if arr.ndim != 2:
        raise InputError(f"{what}: audio must be [samples] or [samples, channels], got shape {arr.shape}")
    if not arr.shape[0] <= 8 < arr.shape[1]:  # to [channels, samples]
        arr = arr.T
    return arr[0] if arr.shape[0] == 1 else arr.mean(axis=0)  # as transformers' load_audio


def load_audio(src, sample_rate=None, what: str = "audio", max_audio_s: float | None = None) -> np.ndarray:
    """Mono float32 samples at 16 kHz from a path, bytes, URL, (array, rate) or an array with sample_rate.
    max_audio_s: an encoded clip longer than this is refused without decoding it whole (None: no limit)."""
    if isinstance(src, tuple):
        if len(src) != 2:
            raise InputError(f"{what}: an audio tuple must be (samples, sample_rate), got {len(src)} items")
        src, sample_rate = src
    if isinstance(src, (str, os.PathLike)):
        if is_url(src):
            src = read_media(src, what, MAX_AUDIO_BYTES)
        else:
            named = f"{what} {shown(os.fspath(src))}"
            if sample_rate is not None:
                raise InputError(f"{named}: sample_rate is for raw arrays; a file carries its own")
            samples, rate = _decode_file(io.BytesIO(read_media(src, what, MAX_AUDIO_BYTES)), named, max_audio_s)
            return _finish(_mono(samples, what), rate, what)
    if isinstance(src, (bytes, bytearray, memoryview)):
        if len(src) == 0:
            raise InputError(f"{what}: the audio data is empty (0 bytes)")
        samples, rate = _decode_file(io.BytesIO(src), what, max_audio_s)
        return _finish(_mono(samples, what), rate, what)
    if isinstance(src, (list, np.ndarray)):
        if sample_rate is None:
            raise InputError(f"{what}: a sample array needs its sample_rate (e.g. sample_rate=16000 or "
                             f"(samples, 16000)); markbase does not guess it")
        rate = _check_rate(sample_rate, what)
        arr = args.array(src, f"{what}: samples")
        return _finish(_mono(_as_float(arr, what), what), rate, what)
    raise InputError(f"{what}: audio must be a path, bytes, a URL, a numpy array with sample_rate or "
                     f"(array, sample_rate); got {type(src).__name__}")


def _finish(samples: np.ndarray, rate: int, what: str) -> np.ndarray:
    if samples.size == 0:
        raise InputError(f"{what}: the audio has no samples")
    samples = np.ascontiguousarray(samples, dtype=np.float32)
    if rate != SAMPLE_RATE:
        import soxr
        n = math.ceil(len(samples) * SAMPLE_RATE / rate)
        samples = soxr.resample(samples, rate, SAMPLE_RATE, quality="soxr_hq")
        samples = np.ascontiguousarray(np.pad(samples, (0, max(0, n - len(samples))))[:n], dtype=np.float32)
    return samples


def audio_tokens(num_samples: int) -> int:
    """Soft tokens of a clip of num_samples (16 kHz) on E2B/E4B: its valid mel frames, halved twice (ceil)."""
    valid = valid_mel_frames(num_samples)
    return ((valid + 1) // 2 + 1) // 2


def valid_mel_frames(num_samples: int) -> int:
    """Frames whose 321-sample window ends on a real sample (the extractor's mask), spec §4.6."""
    return max(0, -(-(num_samples - HOP_LENGTH) // HOP_LENGTH))  # ceil((N − 160) / 160)


def log_mel(samples: np.ndarray) -> tuple[np.ndarray, int]:
    """Gemma4AudioFeatureExtractor on one clip: (features float32 [frames, 128], valid frames). The clip is
    zero-padded to a multiple of 128 samples; frames past the valid ones are zeros, as the extractor's."""
    x = np.asarray(samples, np.float32)
    n = len(x)
    padded = -(-n // PAD_TO_MULTIPLE) * PAD_TO_MULTIPLE
    waveform = np.zeros((1, padded), np.float32)
    waveform[0, :n] = x
    mask = np.zeros(padded, np.int32)
    mask[:n] = 1
    # The extractor's _extract_spectrogram, operation for operation (same dtypes: bit-identical output).
    pad_left = FRAME_LENGTH // 2
    waveform = np.pad(waveform, ((0, 0), (pad_left, 0)), mode="constant")
    mask = np.pad(mask, (pad_left, 0), mode="constant", constant_values=0)
    size = FRAME_LENGTH + 1
    num_frames = (waveform.shape[1] - size) // HOP_LENGTH + 1
    if num_frames <= 0:
        return np.zeros((0, MEL_BINS), np.float32), 0
    frames = np.lib.stride_tricks.as_strided(
        waveform, shape=(1, num_frames, size),
        strides=(waveform.strides[0], waveform.strides[1] * HOP_LENGTH, waveform.strides[1]))[..., :-1]
    frames = frames * WINDOW
    magnitude = np.abs(np.fft.rfft(frames, n=FFT_LENGTH, axis=-1))
    log_mel_spec = np.log(np.matmul(magnitude, MEL_FILTERS) + np.array(MEL_FLOOR, dtype=np.float64))
    spec = log_mel_spec.squeeze(0).astype(np.float32)
    valid = mask[np.arange(num_frames) * HOP_LENGTH + size - 1].astype(bool)
    spec = spec * valid[..., None]
    n_valid = int(valid.sum())
    assert not valid[n_valid:].any(), "the validity mask is a prefix"
    return spec, n_valid


def waveform_frames(samples: np.ndarray, frame: int = UNIFIED_FRAME) -> np.ndarray:
    """Gemma4UnifiedAudioFeatureExtractor on one clip: zero-padded to whole frames of `frame` samples (640 on
    the released 12B: its audio_embed_dim), float32 [n, frame]."""
    x = np.asarray(samples, np.float32)
    n = -(-len(x) // frame)
    out = np.zeros(n * frame, np.float32)
    out[:len(x)] = x
    return out.reshape(n, frame)


def check_max_audio_s(max_audio_s, what: str = "max_audio_s") -> float:
    """The clip length limit in seconds: a finite number > 0, or None for MAX_AUDIO_S."""
    return MAX_AUDIO_S if max_audio_s is None else args.real(max_audio_s, what, lo=0, lo_open=True)


def process_audio(src, *, sample_rate=None, unified: bool = False, max_audio_s: float | None = None,
                  unified_frame: int = UNIFIED_FRAME, what: str = "audio") -> ProcessedAudio:
    """load_audio, the length check, then log_mel (E2B/E4B) or waveform_frames of unified_frame samples (12B)."""
    limit = check_max_audio_s(max_audio_s, f"{what}: max_audio_s")
    samples = load_audio(src, sample_rate, what, limit)
    duration = len(samples) / SAMPLE_RATE
    if duration > limit:
        raise too_long(what, f"{duration:.2f}", limit)
    if unified:
        frames = waveform_frames(samples, unified_frame)
        return ProcessedAudio(frames, len(frames), len(frames), duration)
    features, valid = log_mel(samples)
    if valid == 0:
        raise InputError(f"{what}: the clip is {duration * 1000:.1f} ms, too short to give one audio token "
                         f"(at least {FRAME_LENGTH + 1 - HOP_LENGTH} samples, about 10 ms, are needed)")
    assert valid == valid_mel_frames(len(samples))
    return ProcessedAudio(features, valid, audio_tokens(len(samples)), duration)
