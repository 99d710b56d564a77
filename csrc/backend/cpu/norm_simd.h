// AVX2 building blocks shared by the norm, softmax, rope and elementwise kernels: 8-lane loads / stores
// for f32, bf16 and f16 storage (math always f32), a horizontal sum, e^x for softmax and tanh. x86-64 only: callers
// test norm_simd::available() at run time and keep a portable path, so the code builds on ARM too.
#pragma once
#include <cstdint>

#include "core/dtype.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define MB_NORM_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

namespace mb::cpu::norm_simd {

#if defined(__x86_64__)

inline bool available() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok;
}

MB_NORM_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
MB_NORM_AVX2 inline __m256 load8(const bf16_t* p) {
  // bf16 is the top half of an f32: widen to 32 bits and shift into place (exact).
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
MB_NORM_AVX2 inline __m256 load8(const f16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));  // exact
}

MB_NORM_AVX2 inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
// Same rounding as mb::f32_to_bf16: nearest even; NaN keeps its top bits with the quiet bit forced.
MB_NORM_AVX2 inline void store8(bf16_t* p, __m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m256i r = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
  // Every lane is < 2^16, so the saturating pack is a plain narrowing.
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}
// Hardware conversion, round to nearest even (subnormals, Inf and NaN handled by the instruction).
MB_NORM_AVX2 inline void store8(f16_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

MB_NORM_AVX2 inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Largest lane; only used on NaN-free data (callers detect NaN separately).
MB_NORM_AVX2 inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// e^x for x ≤ 0 (softmax after subtracting the row max), within ~2 ulp of std::exp.
// x = n·ln2 + r with |r| ≤ ln2/2 (ln2 split in two parts so r is exact to f32), e^r by its degree-7
// Taylor polynomial (truncation < 1e-8 relative), times 2^n built in the exponent bits.
// x < −87.33 (where e^x is below the smallest normal f32) returns 0; the exact value there is
// < 1.2e-38, which cannot matter next to the row's largest term e^0 = 1. −inf → 0. No NaN input here.
MB_NORM_AVX2 inline __m256 exp8_nonpositive(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.f / 5040.f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 720.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  // n ∈ [−126, 0]: 2^n is a normal f32.
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// tanh(x) within a few ulp of std::tanh (relative error < 1e-6): x·(1 − x²/3 + 2x⁴/15 − 17x⁶/315 +
// 62x⁸/2835) for |x| < 1/4 (truncation < 1e-8 relative), else sign(x)·(1 − e)/(1 + e) with e = e^(−2|x|)
// (1 − e ≥ 0.39 there, so no cancellation to speak of). NaN propagates.
MB_NORM_AVX2 inline __m256 tanh8(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  const __m256 ax = _mm256_andnot_ps(sign, x);
  const __m256 e = exp8_nonpositive(_mm256_mul_ps(ax, _mm256_set1_ps(-2.f)));
  const __m256 one = _mm256_set1_ps(1.f);
  __m256 big = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
  big = _mm256_or_ps(big, _mm256_and_ps(sign, x));
  const __m256 x2 = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(62.f / 2835.f);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-17.f / 315.f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.f / 15.f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.f / 3.f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, x2), x, x);
  const __m256 r = _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.25f), _CMP_LT_OQ));
  return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

#else

inline bool available() { return false; }

#endif

}  // namespace mb::cpu::norm_simd
