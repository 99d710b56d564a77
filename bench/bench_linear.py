"""linear throughput for Gemma-4 E2B shapes (bf16 weights and activations).

Decode (M = 1) is a GEMV: memory-bound, so it is reported as GB/s of weight traffic and as a fraction of
the memory bandwidth measured in the same run (bench/conftest.py). The quantized decode GEMV (MLX-affine
groups of 64, bf16 scales) is reported the same way for each activation rounding the precision policy offers
(README: precision policy): "f32", "x16" (precision="auto") and, for 4-bit weights, "x8" (precision="fast"). Every call reads a different copy of
the weights, cycling through ≥ 256 MB in total, so they come from main memory as in a real forward pass
(which streams gigabytes per token), not from the 32 MB L3. Prefill (M = 128) is compute-bound and is
reported as GFLOP/s as well, with f32 products and with bf16 products (precision="auto": vdpbf16ps, or AMX
tiles where granted) where this CPU takes them, each as a fraction of the GEMM peak measured in the same run
(bench/yardstick.py: f32, or bf16 for bf16 products).
"""

import itertools

import numpy as np
import pytest

import markbase as mb
from markbase._core import ops

COLD_BYTES = 256 << 20

# (K, N) = (in, out) features; E2B hidden 1536, MLP 6144, q-proj + kv 2048.
DECODE_SHAPES = [(1536, 6144), (6144, 1536), (1536, 2048)]
PREFILL_SHAPES = [(1536, 6144), (6144, 1536)]


def bf16_weight_copies(K, N, total_bytes):
    """Enough bf16 [N, K] weight tensors (distinct memory, same values) to cover total_bytes."""
    r = np.random.default_rng(0)
    bits = mb.Tensor(r.standard_normal((N, K), dtype=np.float32), dtype="bf16").numpy()
    count = max(1, -(-total_bytes // bits.nbytes))
    return [mb.Tensor(bits.copy(), dtype="bf16") for _ in range(count)]


def run(benchmark, memory_bandwidth, summary, M, K, N, label, bf16_products=False, peak=None):
    weights = bf16_weight_copies(K, N, COLD_BYTES)
    x = mb.Tensor(np.random.default_rng(1).standard_normal((M, K), dtype=np.float32), dtype="bf16")
    out = mb.Tensor.empty([M, N], "bf16")
    cycle = itertools.cycle(weights)
    benchmark(lambda: ops.linear(x, next(cycle), out=out, bf16_products=bf16_products))
    seconds = benchmark.stats.stats.median
    weight_gbs = N * K * 2 / seconds / 1e9
    gflops = 2 * M * N * K / seconds / 1e9
    roofline = weight_gbs / memory_bandwidth["read_pool"]
    benchmark.extra_info.update({"M": M, "K": K, "N": N, "weight_GB_per_s": round(weight_gbs, 2),
                                 "GFLOP_per_s": round(gflops, 2), "memory_GB_per_s": round(memory_bandwidth["read_pool"], 2),
                                 "roofline_fraction": round(roofline, 3), "threads": mb._core.num_threads()})
    of_peak = f" = {gflops / peak:.2f} of the GEMM peak ({peak:.0f})" if peak else ""
    if peak:
        benchmark.extra_info.update({"gemm_peak_GFLOP_per_s": round(peak, 1), "peak_fraction": round(gflops / peak, 3)})
    summary.append(f"linear {label} M={M} K={K} N={N} bf16: {seconds * 1e3:.3f} ms, weights {weight_gbs:.1f} GB/s "
                   f"= {roofline:.2f} of measured bandwidth, {gflops:.1f} GFLOP/s{of_peak} "
                   f"({mb._core.num_threads()} threads)")


@pytest.mark.parametrize("K,N", DECODE_SHAPES)
def test_decode_gemv(benchmark, memory_bandwidth, summary, K, N):
    run(benchmark, memory_bandwidth, summary, 1, K, N, "decode")


# f32 products, and bf16 products where this CPU takes them (ops._gemm_bf16_products(): AMD, or AMX).
PREFILL_PRODUCTS = ["f32"] + (["bf16"] if ops._gemm_bf16_products() else [])


@pytest.mark.parametrize("products", PREFILL_PRODUCTS)
@pytest.mark.parametrize("K,N", PREFILL_SHAPES)
def test_prefill_gemm(benchmark, memory_bandwidth, gemm_peak, summary, K, N, products):
    bf16 = products == "bf16"
    kernel = "amx" if bf16 and ops._gemm_amx() else "vdpbf16ps" if bf16 else "f32"
    run(benchmark, memory_bandwidth, summary, 128, K, N, f"prefill ({kernel} products)", bf16_products=bf16,
        peak=gemm_peak["bf16_best" if bf16 else "best"])


# (bits, activation rounding): 8-bit weights keep x16 under precision="fast".
QUANT_MODES = [(8, "x16"), (4, "f32"), (4, "x16"), (4, "x8")]


def quantized_weight_copies(K, N, bits, total_bytes):
    """Enough [N, K] group-64 quantized weights (distinct q buffers, same values) to cover total_bytes, and
    the bytes one GEMV reads (q, scales, biases)."""
    w = mb.Tensor(np.random.default_rng(0).standard_normal((N, K), dtype=np.float32), dtype="bf16")
    q, s, b = ops.quantize(w, bits=bits, group_size=64, scale_dtype="bf16")
    nbytes = q.numpy().nbytes + s.numpy().nbytes + b.numpy().nbytes
    count = max(1, -(-total_bytes // nbytes))
    return [(mb.Tensor(q.numpy().copy()), s, b) for _ in range(count)], nbytes


@pytest.mark.parametrize("bits,rounding", QUANT_MODES)
@pytest.mark.parametrize("K,N", DECODE_SHAPES)
def test_decode_gemv_quantized(benchmark, memory_bandwidth, summary, K, N, bits, rounding):
    copies, nbytes = quantized_weight_copies(K, N, bits, COLD_BYTES)
    x = mb.Tensor(np.random.default_rng(1).standard_normal((1, K), dtype=np.float32))
    kw = dict(bits=bits, group_size=64, int16_activations=rounding != "f32", int8_activations=rounding == "x8")
    cycle = itertools.cycle(copies)
    benchmark(lambda: ops.linear_quantized(x, *next(cycle), **kw))
    seconds = benchmark.stats.stats.median
    weight_gbs = nbytes / seconds / 1e9
    roofline = weight_gbs / memory_bandwidth["read_pool"]
    benchmark.extra_info.update({"K": K, "N": N, "bits": bits, "activations": rounding,
                                 "weight_GB_per_s": round(weight_gbs, 2), "roofline_fraction": round(roofline, 3),
                                 "simd": ops._quant_gemv_simd(), "threads": mb._core.num_threads()})
    summary.append(f"linear_quantized decode K={K} N={N} {bits}-bit x {rounding} ({ops._quant_gemv_simd()}): "
                   f"{seconds * 1e6:.0f} us, weights {weight_gbs:.1f} GB/s = {roofline:.2f} of measured bandwidth")
