"""Audio encoding speed: 5 s and 30 s clips (125 and 750 soft tokens) through the real-size E2B audio tower
(12 conformer layers of 1024, random bf16 weights) and embed_audio, with the FLOP count and the fraction of
the machine's GEMM peak measured in the same run (the best of markbase's linear kernel and numpy/OpenBLAS
on the tower's feed-forward shape at 125 rows); the feature extraction (log-mel) timed apart; and
transformers 5.23's Gemma4AudioModel + embedder (f32, CPU torch, the same two threads) on the same clip,
side by side.

Run explicitly: `PYTHONPATH=python python3 -m pytest bench/bench_audio.py` (shares bench_vision.py's
encoder checkpoint in ./.bench-cache). Speed is reported, never asserted.
"""

import time

import numpy as np
import pytest

from bench_vision import gemm_peak

SR = 16000


def speech_like(seconds: float) -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(int(seconds * SR)) / SR
    return (0.3 * np.sin(2 * np.pi * (120 + 40 * np.sin(3 * t)) * t) + 0.05 * rng.normal(size=t.size)).astype(np.float32)


def tower_flops(ac, text_hidden: int, n: int, frames: int) -> float:
    """2 × multiply-adds of one clip: subsampling convs, input projection, 12 conformer layers (two FFWs,
    q/k/v/post, relative_k_proj over the 12 distances, local attention over ≤ 12 keys, GLU conv block),
    output projection and embed_audio."""
    H, L, (c0, c1) = ac.hidden_size, ac.num_hidden_layers, ac.subsampling_conv_channels
    f1, f2 = 64, 32
    conv = (frames // 2) * f1 * c0 * 9 + (frames // 4) * f2 * c1 * c0 * 9
    window = ac.attention_context_left - 1
    per_layer = n * (2 * 2 * H * 4 * H + 4 * H * H + 2 * H * H + H * H + 2 * window * H + H * ac.conv_kernel_size)
    per_layer += window * H * H  # relative_k_proj
    return 2.0 * (conv + n * (f2 * c1) * H + L * per_layer + n * H * ac.output_proj_dims
                  + n * ac.output_proj_dims * text_hidden)


@pytest.mark.parametrize("seconds", [5, 30])
def test_encode(benchmark, encoders_model, summary, seconds):
    audio_model = encoders_model
    clip = speech_like(seconds)
    t0 = time.perf_counter()
    item = audio_model.media.audio((clip, SR))
    features_s = time.perf_counter() - t0
    f, v = item.audio.features, item.audio.valid_frames
    audio_model._core.encode_audio(f, v)  # warm-up (pages in the weights)

    def run():
        audio_model._core.encode_audio(f, v)

    benchmark.pedantic(run, rounds=3 if seconds == 30 else 5, iterations=1)
    secs = benchmark.stats.stats.min
    n = item.audio.num_soft_tokens
    flops = tower_flops(audio_model.config.audio_config, audio_model.config.text_config.hidden_size, n, len(f))
    # The yardstick is the machine's f32 GEMM peak (the best of both libraries on a large shape); the
    # tower's own 125-row shape is reported next to it (small M costs every library efficiency).
    peak = gemm_peak()
    shape = gemm_peak(n=125, k=1024, m=4096)
    benchmark.extra_info.update(seconds=secs, gflop=flops / 1e9, gflops=flops / secs / 1e9, gemm_peak=peak,
                                gemm_tower_shape=shape)
    summary.append(f"e2b audio encode {seconds} s ({n} soft tokens): {secs:.3f} s (best of rounds), "
                   f"{flops / 1e9:.1f} GFLOP, {flops / secs / 1e9:.0f} GFLOP/s = {flops / secs / 1e9 / peak['peak']:.0%} "
                   f"of the machine's f32 GEMM peak ({peak['peak']:.0f} GFLOP/s at 2304x768x3072; at the tower's "
                   f"125x1024x4096: markbase {shape['markbase']:.0f}, numpy {shape['numpy']:.0f}); "
                   f"features {features_s * 1000:.1f} ms")


def test_transformers_encode_5s(benchmark, summary):
    """transformers' audio tower + embed_audio in f32 (its CPU path) on the same 5 s clip, same threads."""
    import torch
    from transformers.models.gemma4 import configuration_gemma4 as c4
    from transformers.models.gemma4 import modeling_gemma4 as m4
    from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

    from markbase.testing.released import AUDIO, RELEASED

    torch.set_num_threads(2)
    ac = c4.Gemma4AudioConfig(**AUDIO)
    tc = c4.Gemma4TextConfig(hidden_size=RELEASED["gemma-4-E2B-it"]["text_config"]["hidden_size"])
    tower = m4.Gemma4AudioModel(ac).eval()
    embed = m4.Gemma4MultimodalEmbedder(ac, tc).eval()
    t0 = time.perf_counter()
    fe = Gemma4AudioFeatureExtractor()([speech_like(5)], return_tensors="pt")
    features_s = time.perf_counter() - t0
    x, m = fe["input_features"], fe["input_features_mask"]

    def run():
        with torch.no_grad():
            embed(tower(x, m).last_hidden_state)

    run()
    benchmark.pedantic(run, rounds=5, iterations=1)
    secs = benchmark.stats.stats.min
    summary.append(f"transformers 5.23 audio encode 5 s (f32, {torch.get_num_threads()} threads): {secs:.3f} s "
                   f"(best of rounds); features {features_s * 1000:.1f} ms")
