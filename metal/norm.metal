// Row normalisations (ops/norm.h): RMSNorm and LayerNorm over the last dimension, storage of x / y
// f32 / f16 / bf16, optional [D] weight (and bias) in f32 / f16 / bf16, math in f32 with the CPU
// backend's per-element operation order (csrc/backend/cpu/norm.cpp): (x·r)·w for RMSNorm,
// ((x − mean)·rstd)·w + b for LayerNorm; only the order of the row sums differs (tree vs sequential).
//
// Work split: one threadgroup per row (grid.x = rows), T threads (a multiple of 32, ≤ 1024); thread l
// handles elements l, l + T, l + 2T, ... of the row (neighbouring threads read neighbouring elements:
// coalesced). Row sums: per-thread f32 partials, simd_sum, then threadgroup memory across simdgroups
// (norm_reduce.h). Every pass reads the row before the last one writes it, and each element is written
// by the thread that read it last, so exact in-place use (y == x) is safe.
// NaN anywhere in a row makes the row's sum NaN, hence the whole output row NaN (as the CPU ops).
// Absent weight / bias (args.has_weight / has_bias = 0) are bound as empty buffers and never touched.
//
// Kernels: rms_norm_w<P>_<S>, layer_norm_w<P>_<S> (S = storage of x / y, P = of weight and bias;
// f32 when there are none). Bytes per call (rows × D elements, S / P bytes per element):
//   rms_norm_*    reads 2·rows·D·S (x: the sum of squares, then the output pass; the second read is
//                 normally a cache hit) + D·P per row (w, cache-resident), writes rows·D·S (y).
//   layer_norm_*  reads 3·rows·D·S (x: mean, variance, output pass) + 2·D·P per row (w, b),
//                 writes rows·D·S (y).
#include "kernel_common.h"
#include "kernel_args.h"
#include "norm_reduce.h"

namespace norm_family {

// y = x · (mean(x²) + eps)^-0.5 · w, one row per threadgroup.
template <typename S, typename P>
inline void rms_norm_body(DEVICE_PTR(const S) x, DEVICE_PTR(const P) w, DEVICE_PTR(S) y, constant NormArgs& args,
                          threadgroup float* partial, uint row, uint lidx, uint group_threads, uint simd_lane,
                          uint simd_group) {
  if (row >= args.rows) return;  // uniform across the group: no barrier is skipped by some threads only
  const uint D = args.cols;
  const uint base = row * D;
  const uint num_simdgroups = group_threads / 32;

  float sum_sq = 0.0f;
  for (uint i = lidx; i < D; i += group_threads) {
    const float v = load_f32(x[base + i]);
    sum_sq += v * v;
  }
  sum_sq = threadgroup_sum(sum_sq, partial, simd_lane, simd_group, num_simdgroups);
  // 1 / sqrt(·) as torch.pow(v, -0.5) on f32 (and the CPU backend); not rsqrt, whose rounding differs.
  const float r = 1.0f / precise::sqrt(sum_sq / float(D) + args.eps);

  for (uint i = lidx; i < D; i += group_threads) {
    float v = load_f32(x[base + i]) * r;
    if (args.has_weight) v = v * load_f32(w[i]);
    y[base + i] = store_as<S>(v);
  }
}

// y = (x − mean) / sqrt(var + eps) · w + b with the biased variance, two passes for the statistics
// (mean, then Σ(x − mean)²: no cancellation when |mean| ≫ std), one threadgroup per row.
template <typename S, typename P>
inline void layer_norm_body(DEVICE_PTR(const S) x, DEVICE_PTR(const P) w, DEVICE_PTR(const P) b, DEVICE_PTR(S) y,
                            constant NormArgs& args, threadgroup float* partial, uint row, uint lidx,
                            uint group_threads, uint simd_lane, uint simd_group) {
  if (row >= args.rows) return;  // uniform across the group
  const uint D = args.cols;
  const uint base = row * D;
  const uint num_simdgroups = group_threads / 32;

  float sum = 0.0f;
  for (uint i = lidx; i < D; i += group_threads) sum += load_f32(x[base + i]);
  sum = threadgroup_sum(sum, partial, simd_lane, simd_group, num_simdgroups);
  const float mean = sum / float(D);

  float sum_sq = 0.0f;
  for (uint i = lidx; i < D; i += group_threads) {
    const float c = load_f32(x[base + i]) - mean;
    sum_sq += c * c;
  }
  sum_sq = threadgroup_sum(sum_sq, partial, simd_lane, simd_group, num_simdgroups);
  const float rstd = 1.0f / precise::sqrt(sum_sq / float(D) + args.eps);

  for (uint i = lidx; i < D; i += group_threads) {
    float v = (load_f32(x[base + i]) - mean) * rstd;
    if (args.has_weight) v = v * load_f32(w[i]);
    if (args.has_bias) v = v + load_f32(b[i]);
    y[base + i] = store_as<S>(v);
  }
}

}  // namespace norm_family

#define MB_RMS_NORM_KERNEL(pdtype, P, dtype, S)                                                                      \
  kernel void rms_norm_w##pdtype##_##dtype(DEVICE_PTR(const S) x [[buffer(0)]], DEVICE_PTR(const P) w [[buffer(1)]], \
                                           DEVICE_PTR(S) y [[buffer(2)]], constant NormArgs& args [[buffer(3)]],     \
                                           MB_THREAD_POSITION) {                                                     \
    MB_THREADGROUP(float, partial, [32]);                                                                            \
    norm_family::rms_norm_body<S, P>(x, w, y, args, partial, tgid.x, lidx, tg_size.x, simd_lane, simd_group);        \
  }                                                                                                                  \
  MB_REGISTER_KERNEL(rms_norm_w##pdtype##_##dtype)

#define MB_LAYER_NORM_KERNEL(pdtype, P, dtype, S)                                                                      \
  kernel void layer_norm_w##pdtype##_##dtype(DEVICE_PTR(const S) x [[buffer(0)]], DEVICE_PTR(const P) w [[buffer(1)]], \
                                             DEVICE_PTR(const P) b [[buffer(2)]], DEVICE_PTR(S) y [[buffer(3)]],       \
                                             constant NormArgs& args [[buffer(4)]], MB_THREAD_POSITION) {              \
    MB_THREADGROUP(float, partial, [32]);                                                                              \
    norm_family::layer_norm_body<S, P>(x, w, b, y, args, partial, tgid.x, lidx, tg_size.x, simd_lane, simd_group);     \
  }                                                                                                                    \
  MB_REGISTER_KERNEL(layer_norm_w##pdtype##_##dtype)

// Every (parameter storage, x storage) pair the CPU ops take.
#define MB_NORM_KERNELS_FOR_PARAM(KERNEL, pdtype, P) \
  KERNEL(pdtype, P, f32, float)                      \
  KERNEL(pdtype, P, f16, half)                       \
  KERNEL(pdtype, P, bf16, bf16_t)

MB_NORM_KERNELS_FOR_PARAM(MB_RMS_NORM_KERNEL, f32, float)
MB_NORM_KERNELS_FOR_PARAM(MB_RMS_NORM_KERNEL, f16, half)
MB_NORM_KERNELS_FOR_PARAM(MB_RMS_NORM_KERNEL, bf16, bf16_t)
MB_NORM_KERNELS_FOR_PARAM(MB_LAYER_NORM_KERNEL, f32, float)
MB_NORM_KERNELS_FOR_PARAM(MB_LAYER_NORM_KERNEL, f16, half)
MB_NORM_KERNELS_FOR_PARAM(MB_LAYER_NORM_KERNEL, bf16, bf16_t)
