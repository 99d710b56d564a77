// bf16 packing shared by the vdpbf16ps kernels (bf16_gemm.cpp) and the AMX GEMM (bf16_gemm_amx.cpp).
#pragma once
#include <cstdint>

#include "backend/cpu/gemm.h"
#include "backend/cpu/simd.h"

#if MB_HAVE_X86_SIMD
namespace mb::cpu {

#define MB_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512bf16,avx2,fma,f16c")))

constexpr int64_t kBf16SliceK = 512;  // k per slice (256 pairs): a 32-row weight panel is 32 KB
constexpr int kBf16PanelRows = 32;    // weight rows (columns of Y) per panel

// 16 floats rounded to bf16 (nearest-even, as torch's .to(bfloat16)).
MB_BF16_TARGET inline __m256i round16(const float* x) { return (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x)); }

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

}  // namespace mb::cpu
#endif
