"""Image encoding speed: a 768×768 image (2304 patches → 256 soft tokens, the default 280 budget) through the
real-size E2B vision tower (random bf16 weights), and the prefill of its 256 soft tokens on the real-size
E2B text stack. Reported with the FLOP count and the fraction of the machine's GEMM peak measured in the
same run (the best of markbase's own linear kernel and numpy/OpenBLAS on the tower's largest GEMM).

Run explicitly: `PYTHONPATH=python python3 -m pytest bench/bench_vision.py` (writes ~1 GB of encoder
weights to ./.bench-cache the first time; the prefill part uses bench_decode.py's text checkpoint).
Speed is reported, never asserted. Reference points measured on this machine: llama.cpp's mmproj and
transformers both take about 5.2 s for this encode.
"""

import os
import time

import numpy as np
import pytest

import markbase as mb

from conftest import ROOT


def tower_flops(vc, n: int) -> float:
    """Multiply-adds ×2 of one image of n patches: the linears, attention (QKᵀ and PV) and the patch embedder."""
    D, I, L = vc.hidden_size, vc.intermediate_size, vc.num_hidden_layers
    hq, hkv, hd = vc.num_attention_heads, vc.num_key_value_heads, vc.head_dim
    per_layer = n * (D * hq * hd + 2 * D * hkv * hd + hq * hd * D + 3 * D * I) + 2 * hq * n * n * hd
    return 2.0 * (L * per_layer + n * 3 * vc.patch_size ** 2 * D)


def gemm_peak(n=2304, k=768, m=3072, rounds=5) -> dict:
    """GFLOP/s of the tower's largest GEMM shape: markbase's linear kernel (f32 activations × bf16 weights, as the
    tower runs) and numpy's f32 matmul; best of `rounds`."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, k), dtype=np.float32)
    w = rng.standard_normal((m, k), dtype=np.float32)
    wb = mb.Tensor(w, dtype="bf16")
    out = {}
    best = 1e9
    for _ in range(rounds):
        t0 = time.perf_counter()
        mb._core.ops.linear(x, wb)
        best = min(best, time.perf_counter() - t0)
    out["markbase"] = 2 * n * k * m / best / 1e9
    best = 1e9
    for _ in range(rounds):
        t0 = time.perf_counter()
        x @ w.T
        best = min(best, time.perf_counter() - t0)
    out["numpy"] = 2 * n * k * m / best / 1e9
    out["peak"] = max(out.values())
    return out


def test_encode_768(benchmark, encoders_model, summary):
    vision_model = encoders_model
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (768, 768, 3), dtype=np.uint8)
    item = vision_model.media.image(image, 280)
    frame = item.frames[0]
    vision_model._core.encode_image(frame.pixel_values, frame.positions)  # warm-up (pages in the weights)

    def run():
        vision_model._core.encode_image(frame.pixel_values, frame.positions)

    benchmark.pedantic(run, rounds=3, iterations=1)
    secs = benchmark.stats.stats.median
    flops = tower_flops(vision_model.config.vision_config, len(frame.pixel_values))
    peak = gemm_peak()
    benchmark.extra_info.update(seconds=secs, gflop=flops / 1e9, gflops=flops / secs / 1e9, gemm_peak=peak)
    summary.append(f"e2b vision encode 768x768 ({len(frame.pixel_values)} patches -> {frame.num_soft_tokens} soft "
                   f"tokens): {secs:.2f} s, {flops / 1e9:.0f} GFLOP, {flops / secs / 1e9:.0f} GFLOP/s = "
                   f"{flops / secs / 1e9 / peak['peak']:.0%} of the measured GEMM peak "
                   f"({peak['peak']:.0f} GFLOP/s: markbase {peak['markbase']:.0f}, numpy {peak['numpy']:.0f}); "
                   f"preprocess {item.preprocess_s * 1000:.0f} ms")


def test_prefill_256_soft_tokens(benchmark, summary):
    d = os.path.join(ROOT, "e2b-real-bf16-text")
    if not os.path.exists(os.path.join(d, "generation_config.json")):
        pytest.fail(f"run bench/bench_decode.py first: it writes the real-size text checkpoint {d}")
    model = mb.load(d, max_context=4096)
    H = model.config.text_config.hidden_size
    ids = np.concatenate([[2, 105], [model.config.boi_token_id], np.full(256, model.config.image_token_id),
                          [model.config.eoi_token_id], np.arange(300, 310)]).astype(np.int32)
    x = model.embed(ids)
    x[3:259] = np.random.default_rng(1).standard_normal((256, H)).astype(np.float32) * 0.02

    def run():
        model.session().prefill_embeddings(x, ids)

    benchmark.pedantic(run, rounds=3, iterations=1, warmup_rounds=1)
    secs = benchmark.stats.stats.median
    summary.append(f"e2b prefill of an image prompt ({len(ids)} tokens, 256 soft): {secs:.2f} s, "
                   f"{len(ids) / secs:.1f} tok/s")
