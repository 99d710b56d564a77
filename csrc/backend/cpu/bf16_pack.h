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

constexpr int64_t kBf16SliceK = 512;  // k per slice (256 pairs): a 32-row weight panel is 32 KB
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
// zero), then panel outer, tile inner, so a 32 KB panel stays in L1 while the task's x tiles pass it; partial
// tiles computed whole in an edge buffer; the bias added last. Kernel (x already packed by its caller):
//   kRows: x rows per tile; padded_k(kc): k a slice's tiles run over (kc, or kc rounded up to whole AMX tiles);
//   tile(k0, kcp, row, panel, c, ldc, accumulate): c [kRows, 32] (row stride ldc) (+)= x rows [row, row + kRows)
//   of slice k0 · the panel; begin_thread() / end_thread() around each thread's share.
constexpr int64_t kPanelTaskRows = 576, kPanelTaskCols = 6 * kBf16PanelRows;

template <class Kernel>
void run_panel_gemm(const Kernel& kernel, int64_t M, int64_t N, int64_t K, const bf16_t* W, const float* bias,
                    float* Y) {
  constexpr int64_t kRows = Kernel::kRows, kCols = kBf16PanelRows, kPanelInts = kBf16SliceK / 2 * kCols;
  static_assert(kPanelTaskRows % kRows == 0);
  const int64_t mb = (M + kPanelTaskRows - 1) / kPanelTaskRows, nb = (N + kPanelTaskCols - 1) / kPanelTaskCols;
  parallel_for(mb * nb, 1, [&](int64_t t0, int64_t t1) {
    // This thread's panels of one k slice, reused across calls.
    thread_local std::vector<int32_t> panel_store(size_t(kPanelTaskCols / kCols * kPanelInts + 16));
    int32_t* const panels0 =
        reinterpret_cast<int32_t*>((reinterpret_cast<uintptr_t>(panel_store.data()) + 63) & ~uintptr_t(63));
    alignas(64) float edge[kRows * kCols];  // a partial tile's Y
    kernel.begin_thread();
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t m0 = (t / nb) * kPanelTaskRows, n0 = (t % nb) * kPanelTaskCols;
      const int64_t mc = std::min(kPanelTaskRows, M - m0), nc = std::min(kPanelTaskCols, N - n0);
      const int64_t tiles_m = (mc + kRows - 1) / kRows, npanels = (nc + kCols - 1) / kCols;
      for (int64_t k0 = 0; k0 < K; k0 += kBf16SliceK) {
        const int64_t kc = std::min(kBf16SliceK, K - k0), kcp = kernel.padded_k(kc);
        const bool accumulate = k0 > 0;
        for (int64_t p = 0; p < npanels; ++p) {
          int32_t* panel = panels0 + p * kPanelInts;
          pack_bf16_panel(W, K, n0 + p * kCols, int(std::min<int64_t>(kCols, nc - p * kCols)), k0, kc, panel);
          std::fill(panel + kc / 2 * kCols, panel + kcp / 2 * kCols, 0);
        }
        for (int64_t p = 0; p < npanels; ++p) {
          const int64_t col = n0 + p * kCols;
          const int nr = int(std::min<int64_t>(kCols, n0 + nc - col));
          const int32_t* panel = panels0 + p * kPanelInts;
          for (int64_t s = 0; s < tiles_m; ++s) {
            const int64_t row = m0 + s * kRows;
            const int mr = int(std::min<int64_t>(kRows, m0 + mc - row));
            float* c = Y + row * N + col;
            if (nr == kCols && mr == kRows) {
              kernel.tile(k0, kcp, row, panel, c, N, accumulate);
            } else {  // a partial tile: computed full-size in `edge`, the valid part copied
              for (int r = 0; r < kRows; ++r)
                for (int j = 0; j < kCols; ++j) edge[r * kCols + j] = accumulate && r < mr && j < nr ? c[r * N + j] : 0.f;
              kernel.tile(k0, kcp, row, panel, edge, kCols, accumulate);
              for (int r = 0; r < mr; ++r) std::copy(edge + r * kCols, edge + r * kCols + nr, c + r * N);
            }
          }
        }
      }
      if (bias)
        for (int64_t i = 0; i < mc; ++i)
          for (int64_t j = 0; j < nc; ++j) Y[(m0 + i) * N + n0 + j] += bias[n0 + j];
    }
    kernel.end_thread();
  });
}

}  // namespace mb::cpu
#endif
