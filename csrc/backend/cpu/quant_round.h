// x rounded to 16- or 8-bit integers per weight group with AVX-512 (the decode GEMV's byte kernel and
// round_x16): the scalar rounding's exact values, 16 lanes at a time.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cpu/simd.h"

#if MB_HAVE_X86_SIMD
#include <immintrin.h>

namespace mb::cpu {

// One group of x (gs ≤ 128, a multiple of 32) rounded as round_xq_scalar (quant.cpp) rounds it — the same
// f32 amax, inverse, product and round-to-nearest-even, so every x16 / x8 is the scalar rounding's — into q32,
// with its dx and Σ x (summed in double, then rounded: the f32 nearest the exact sum but in rare
// double-rounding cases, whatever the order). False for a NaN / infinity.
template <int QMAX>
MB_AVX512_TARGET bool round_group(const float* xg, int gs, int32_t* q32, float* dx, float* xsum) {
  const int nv = gs / 16;
  __m512 v[8], amax_v = _mm512_setzero_ps();
  __m512d sum_v = _mm512_setzero_pd();
  __mmask16 nan = 0;
  for (int i = 0; i < nv; ++i) {
    v[i] = _mm512_loadu_ps(xg + 16 * i);
    nan |= _mm512_cmp_ps_mask(v[i], v[i], _CMP_UNORD_Q);
    amax_v = _mm512_max_ps(amax_v, _mm512_abs_ps(v[i]));
    sum_v = _mm512_add_pd(sum_v, _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v[i])),
                                               _mm512_cvtps_pd(_mm256_castsi256_ps(_mm512_extracti64x4_epi64(_mm512_castps_si512(v[i]), 1)))));
  }
  const float amax = _mm512_reduce_max_ps(amax_v), qmax = float(QMAX);
  if (nan || !std::isfinite(amax)) return false;
  *dx = amax / qmax;
  *xsum = float(_mm512_reduce_add_pd(sum_v));
  const float inv = amax > 0.f ? qmax / amax : 0.f;
  if (std::isinf(inv)) {  // amax below ~1e-34: round_xq scales such a group in double
    const double inv_tiny = double(QMAX) / double(amax);
    for (int j = 0; j < gs; ++j)
      q32[j] = int32_t(std::clamp(std::nearbyint(float(double(xg[j]) * inv_tiny)), -qmax, qmax));
    return true;
  }
  const __m512 inv_v = _mm512_set1_ps(inv), hi_v = _mm512_set1_ps(qmax), lo_v = _mm512_set1_ps(-qmax);
  for (int i = 0; i < nv; ++i) {
    const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(v[i], inv_v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_storeu_si512(q32 + 16 * i, _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(r, lo_v), hi_v)));
  }
  return true;
}

// x [K] rounded a group at a time (round_group), each 16 rounded values handed to store(v, k) with k their
// first column in the kernel's order — in order, or with deinterleave (the 4-bit kernels' nibble order)
// even columns to [0, K/2) and odd ones to [K/2, K). dx, xsum: [K / gs]. False for a NaN / infinity.
template <int QMAX, class Store>
MB_AVX512_TARGET bool round_row(const float* x, int64_t K, int gs, bool deinterleave, float* dx, float* xsum,
                                Store&& store) {
  const __m512i evens = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odds = _mm512_add_epi32(evens, _mm512_set1_epi32(1));
  alignas(64) int32_t q32[128];
  for (int64_t g = 0, k0 = 0; g < K / gs; ++g, k0 += gs) {
    if (!round_group<QMAX>(x + k0, gs, q32, dx + g, xsum + g)) return false;
    for (int i = 0; i < gs; i += 32) {
      const __m512i a = _mm512_load_si512(q32 + i), b = _mm512_load_si512(q32 + i + 16);
      if (deinterleave) {
        store(_mm512_permutex2var_epi32(a, evens, b), (k0 + i) / 2);
        store(_mm512_permutex2var_epi32(a, odds, b), K / 2 + (k0 + i) / 2);
      } else {
        store(a, k0 + i);
        store(b, k0 + i + 16);
      }
    }
  }
  return true;
}

// round_group with AVX2, 8 lanes at a time (gs ≤ 128, a multiple of 8): the same values (the same f32
// operations per element; Σ x in double in another order, rounded to f32 as there).
template <int QMAX>
MB_AVX2_TARGET bool round_group_avx2(const float* xg, int gs, int32_t* q32, float* dx, float* xsum) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 amax_v = _mm256_setzero_ps(), nan_v = _mm256_setzero_ps();
  __m256d sum_v = _mm256_setzero_pd();
  for (int i = 0; i < gs; i += 8) {
    const __m256 v = _mm256_loadu_ps(xg + i);
    nan_v = _mm256_or_ps(nan_v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    amax_v = _mm256_max_ps(amax_v, _mm256_andnot_ps(sign, v));
    sum_v = _mm256_add_pd(sum_v, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                                               _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax_v), _mm256_extractf128_ps(amax_v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  const float amax = _mm_cvtss_f32(m), qmax = float(QMAX);
  if (_mm256_movemask_ps(nan_v) || !std::isfinite(amax)) return false;
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(sum_v), _mm256_extractf128_pd(sum_v, 1));
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  *dx = amax / qmax;
  *xsum = float(_mm_cvtsd_f64(s));
  const float inv = amax > 0.f ? qmax / amax : 0.f;
  if (std::isinf(inv)) {  // amax below ~1e-34: scaled in double, as the scalar rounding does
    const double inv_tiny = double(QMAX) / double(amax);
    for (int j = 0; j < gs; ++j)
      q32[j] = int32_t(std::clamp(std::nearbyint(float(double(xg[j]) * inv_tiny)), -qmax, qmax));
    return true;
  }
  const __m256 inv_v = _mm256_set1_ps(inv), hi_v = _mm256_set1_ps(qmax), lo_v = _mm256_set1_ps(-qmax);
  for (int i = 0; i < gs; i += 8) {
    const __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xg + i), inv_v),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q32 + i), _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo_v), hi_v)));
  }
  return true;
}

}  // namespace mb::cpu
#endif
