// What the vdpbf16ps kernels (bf16_gemm.cpp) and the AMX GEMM (bf16_gemm_amx.cpp) share: the rounding of x, the
// weight panels, and the GEMM's loop over tasks, k slices and panels.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/simd.h"
#include "core/thread_pool.h"

#if MB_HAVE_X86_SIMD
namespace mb::cpu {

#define MB_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512bf16,avx2,fma,f16c")))

constexpr int64_t kBf16SliceK = 512;  // the longest k slice (256 pairs): a 32-row weight panel of 32 KB
constexpr int kBf16PanelRows = 32;    // weight rows (columns of Y) per panel

// 16 floats rounded to bf16 (nearest-even, as torch's .to(bfloat16)).
MB_BF16_TARGET inline __m256i round16(const float* x) { return (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x)); }

// x row [K] rounded to bf16 (nearest-even), zero-padded from K to ldx.
MB_BF16_TARGET inline void round_row_bf16(const float* x, int64_t K, int64_t ldx, uint16_t* dst) {
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), round16(x + k));
  for (; k < K; ++k) dst[k] = f32_to_bf16(x[k]);
  for (; k < ldx; ++k) dst[k] = 0;
}

// kBf16PanelRows weight rows [n0, n0 + rows) (zero rows past it) of k slice [k0, k0 + kc), kc <= kBf16SliceK,
// as panel[kp · 32 + j] = the pair (w[n0 + j, k0 + 2kp], w[n0 + j, k0 + 2kp + 1]): each row's bf16 pairs are
// 32-bit words, so the f32 panel transposer moves them unchanged.
inline void pack_bf16_panel(const bf16_t* W, int64_t K, int64_t n0, int rows, int64_t k0, int64_t kc,
                            int32_t* panel) {
  alignas(64) static const int32_t zeros[kBf16SliceK / 2] = {};
  const float* row_ptrs[kBf16PanelRows];
  for (int j = 0; j < kBf16PanelRows; ++j)
    row_ptrs[j] = j < rows ? reinterpret_cast<const float*>(W + (n0 + j) * K + k0) : reinterpret_cast<const float*>(zeros);
  transpose_panel32(row_ptrs, kc / 2, reinterpret_cast<float*>(panel));
}

// Y [M, N] (+ bias) from a bf16-products tile kernel: tasks of kPanelTaskRows x rows × kPanelTaskCols weight rows over
// the pool; per task and k slice the task's weight panels packed once (pairs from kc to the kernel's padded_k(kc)
// zero), then panel outer, tile inner, so a panel stays in L1 while the task's x tiles pass it; the task's Y in
// a buffer (partial tiles computed whole), copied out with the bias. Kernel (x already packed by its caller):
//   kRows: x rows per tile; kTaskPanels: weight panels per task; kSliceK: k per slice (<= kBf16SliceK);
//   padded_k(kc): k a slice's tiles run over (kc, or kc rounded up to whole AMX tiles);
//   tile(k0, kcp, row, panel, c, ldc, accumulate): c [kRows, 32] (row stride ldc) (+)= x rows [row, row + kRows)
//   of slice k0 · the panel; begin_thread() / end_thread() around each thread's share.
constexpr int64_t kPanelTaskRows = 576;

template <class Kernel>
void run_panel_gemm(const Kernel& kernel, int64_t M, int64_t N, int64_t K, const bf16_t* W, const float* bias,
                    float* Y) {
  constexpr int64_t kRows = Kernel::kRows, kSlice = Kernel::kSliceK, kCols = kBf16PanelRows;
  constexpr int64_t kPanelTaskCols = Kernel::kTaskPanels * kCols;
  constexpr int64_t kPanelInts = kSlice / 2 * kCols;
  static_assert(kSlice <= kBf16SliceK && kSlice % 32 == 0);
  static_assert(kPanelTaskRows % kRows == 0);
  const int64_t mb = (M + kPanelTaskRows - 1) / kPanelTaskRows, nb = (N + kPanelTaskCols - 1) / kPanelTaskCols;
  parallel_for(mb * nb, 1, [&](int64_t t0, int64_t t1) {
    // This thread's panels of one k slice, reused across calls.
    thread_local std::vector<int32_t> panel_store(size_t(kPanelTaskCols / kCols * kPanelInts + 16));
    int32_t* const panels0 = align64(panel_store.data());
    // The task's Y block, accumulated over the k slices in a thread-local buffer (row stride kPanelTaskCols):
    // its tiles span a few pages, where rows of Y itself are N floats apart (a TLB miss per tile row).
    thread_local std::vector<float> acc_store(size_t(kPanelTaskRows * kPanelTaskCols + 16));
    float* const acc = align64(acc_store.data());
    kernel.begin_thread();
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t m0 = (t / nb) * kPanelTaskRows, n0 = (t % nb) * kPanelTaskCols;
      const int64_t mc = std::min(kPanelTaskRows, M - m0), nc = std::min(kPanelTaskCols, N - n0);
      const int64_t tiles_m = (mc + kRows - 1) / kRows, npanels = (nc + kCols - 1) / kCols;
      for (int64_t k0 = 0; k0 < K; k0 += kSlice) {
        const int64_t kc = std::min(kSlice, K - k0), kcp = kernel.padded_k(kc);
        const bool accumulate = k0 > 0;
        for (int64_t p = 0; p < npanels; ++p) {
          int32_t* panel = panels0 + p * kPanelInts;
          pack_bf16_panel(W, K, n0 + p * kCols, int(std::min<int64_t>(kCols, nc - p * kCols)), k0, kc, panel);
          std::fill(panel + kc / 2 * kCols, panel + kcp / 2 * kCols, 0);
        }
        // Partial tiles run whole: the buffer has room for them, and the rows / columns past Y are dropped.
        for (int64_t p = 0; p < npanels; ++p)
          for (int64_t s = 0; s < tiles_m; ++s)
            kernel.tile(k0, kcp, m0 + s * kRows, panels0 + p * kPanelInts, acc + s * kRows * kPanelTaskCols + p * kCols,
                        kPanelTaskCols, accumulate);
      }
      for (int64_t i = 0; i < mc; ++i) {
        float* y = Y + (m0 + i) * N + n0;
        const float* a = acc + i * kPanelTaskCols;
        if (bias)
          for (int64_t j = 0; j < nc; ++j) y[j] = a[j] + bias[n0 + j];
        else
          std::copy(a, a + nc, y);
      }
    }
    kernel.end_thread();
  });
}

}  // namespace mb::cpu
#endif
