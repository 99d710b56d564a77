// Softmax over the last dimension (ops/softmax.h), storage f32 / f16 / bf16, math in f32 with
// precise::exp, each output e^(x − max) / Σ e^(x − max) exactly as the CPU reference writes it
// (csrc/backend/cpu/softmax.cpp); only the order of the row sum differs (tree vs sequential).
// Special rows, as the CPU ops: every entry −inf → zeros; any NaN or any +inf → the whole row NaN.
//
// Work split: one threadgroup per row (grid.x = rows), T threads (a multiple of 32, ≤ 1024); thread l
// handles elements l, l + T, ... (coalesced). Three passes over the row: max (simd_max + threadgroup
// memory), Σ e^(x − max) (simd_sum + threadgroup memory), then the output; every pass reads the row
// before the last one writes it, each element written by the thread that read it: y == x is safe.
//
// Bytes per call (rows × D elements, S bytes per element): softmax_row_<dtype> reads 3·rows·D·S (x,
// once per pass; the second and third reads are normally cache hits), writes rows·D·S (y).
#include "kernel_common.h"
#include "kernel_args.h"
#include "norm_reduce.h"

namespace norm_family {

template <typename S>
inline void softmax_body(DEVICE_PTR(const S) x, DEVICE_PTR(S) y, constant SoftmaxArgs& args, threadgroup float* partial,
                         uint row, uint lidx, uint group_threads, uint simd_lane, uint simd_group) {
  if (row >= args.rows) return;  // uniform across the group: no barrier is skipped by some threads only
  const uint D = args.cols;
  const uint base = row * D;
  const uint num_simdgroups = group_threads / 32;

  // Row max where a NaN counts as +inf: both make every output NaN (a NaN spreads to its row as in the
  // CPU ops; +inf gives inf − inf = NaN as torch), so one reduction answers both questions.
  float m = -INFINITY;
  for (uint i = lidx; i < D; i += group_threads) {
    const float v = load_f32(x[base + i]);
    const float key = (v != v) ? INFINITY : v;
    m = key > m ? key : m;
  }
  m = threadgroup_max(m, partial, simd_lane, simd_group, num_simdgroups);

  if (m == -INFINITY || m == INFINITY) {
    // Fully masked row: zeros by definition, not NaN. NaN / +inf in the row: NaN everywhere.
    const float fill = m == INFINITY ? NAN : 0.0f;
    for (uint i = lidx; i < D; i += group_threads) y[base + i] = store_as<S>(fill);
    return;  // uniform: m is the same in every thread
  }

  float sum = 0.0f;
  for (uint i = lidx; i < D; i += group_threads) sum += precise::exp(load_f32(x[base + i]) - m);
  sum = threadgroup_sum(sum, partial, simd_lane, simd_group, num_simdgroups);

  // sum ≥ 1 (the max contributes e^0 = 1): the division is finite.
  for (uint i = lidx; i < D; i += group_threads) y[base + i] = store_as<S>(precise::exp(load_f32(x[base + i]) - m) / sum);
}

}  // namespace norm_family

#define MB_SOFTMAX_KERNEL(dtype, S)                                                                    \
  kernel void softmax_row_##dtype(DEVICE_PTR(const S) x [[buffer(0)]], DEVICE_PTR(S) y [[buffer(1)]],  \
                                  constant SoftmaxArgs& args [[buffer(2)]], MB_THREAD_POSITION) {      \
    MB_THREADGROUP(float, partial, [32]);                                                              \
    norm_family::softmax_body<S>(x, y, args, partial, tgid.x, lidx, tg_size.x, simd_lane, simd_group); \
  }                                                                                                    \
  MB_REGISTER_KERNEL(softmax_row_##dtype)

MB_SOFTMAX_KERNEL(f32, float)
MB_SOFTMAX_KERNEL(f16, half)
MB_SOFTMAX_KERNEL(bf16, bf16_t)
