// Runtime SIMD selection and the AVX2 helpers the CPU kernels share.
// Kernels built with MB_AVX2_TARGET are only called when cpu_has_avx2() is true; every such kernel has
// a portable fallback so the code builds and runs on ARM and on x86 without AVX2.
#pragma once
#include <cstdint>

#include "core/dtype.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define MB_HAVE_X86_SIMD 1
// AVX2 + FMA + F16C: every x86 CPU since Haswell / Zen 1.
#define MB_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
// AVX-512 with VNNI (vpdpwssd): Intel since Ice Lake / Cascade Lake, AMD since Zen 4.
#define MB_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#else
#define MB_HAVE_X86_SIMD 0
#endif

namespace mb::cpu {

// True when the CPU has AVX2, FMA and F16C and the environment does not disable SIMD
// (MARKBASE_SIMD=off forces the portable kernels, so tests can check them on an AVX2 machine).
bool cpu_has_avx2();
// True when the CPU has AVX-512 F/BW/VL/VNNI (with OS support for the zmm state) besides cpu_has_avx2(),
// and MARKBASE_SIMD is not "off" or "avx2" (which keeps the AVX2 kernels, for tests and comparisons).
bool cpu_has_avx512_vnni();

// p rounded up to a 64-byte boundary (a scratch vector allocated 16 floats / 64 bytes longer than it needs): no
// vector load from it splits a cache line.
template <class T>
T* align64(T* p) {
  return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63));
}

#if MB_HAVE_X86_SIMD

// 8 consecutive elements widened to f32 (exact for bf16 and f16).
MB_AVX2_TARGET inline __m256 load8_f32(const float* p) { return _mm256_loadu_ps(p); }
MB_AVX2_TARGET inline __m256 load8_f32(const bf16_t* p) {
  // bf16 is the top half of an f32: zero-extend to 32 bits and shift into place.
  __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}
MB_AVX2_TARGET inline __m256 load8_f32(const f16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// 16 consecutive elements widened to f32 (exact for bf16 and f16).
MB_AVX512_TARGET inline __m512 load16_f32(const float* p) { return _mm512_loadu_ps(p); }
MB_AVX512_TARGET inline __m512 load16_f32(const bf16_t* p) {
  const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));  // bf16 is the top half of an f32
}
MB_AVX512_TARGET inline __m512 load16_f32(const f16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// The same for the lanes of mask (the others 0; nothing read past them).
MB_AVX512_TARGET inline __m512 load16_f32_masked(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }
MB_AVX512_TARGET inline __m512 load16_f32_masked(const bf16_t* p, __mmask16 mask) {
  const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}
MB_AVX512_TARGET inline __m512 load16_f32_masked(const f16_t* p, __mmask16 mask) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p));
}

// Sum of the 8 lanes.
MB_AVX2_TARGET inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

#endif  // MB_HAVE_X86_SIMD

}  // namespace mb::cpu
