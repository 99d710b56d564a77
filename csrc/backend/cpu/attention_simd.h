// Inner loops of the fast attention kernel over one tile of gathered key / value rows, in a portable
// version and an AVX2+FMA version (selected at run time by attention_simd()). f32 math throughout.
#pragma once
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mb::cpu::attn_simd {

// out[j] = Σ_i q[i]·rows[j][i]   for j < n
using DotRowsFn = void (*)(float* out, const float* q, const float* const* rows, int n, int64_t d);
// acc[i] += Σ_j w[j]·rows[j][i]  for i < d
using AccumulateRowsFn = void (*)(float* acc, const float* w, const float* const* rows, int n, int64_t d);

inline void dot_rows_portable(float* out, const float* q, const float* const* rows, int n, int64_t d) {
  for (int j = 0; j < n; ++j) {
    const float* r = rows[j];
    float s = 0.f;
    for (int64_t i = 0; i < d; ++i) s += q[i] * r[i];
    out[j] = s;
  }
}

inline void accumulate_rows_portable(float* acc, const float* w, const float* const* rows, int n, int64_t d) {
  for (int j = 0; j < n; ++j) {
    const float wj = w[j];
    const float* r = rows[j];
    for (int64_t i = 0; i < d; ++i) acc[i] += wj * r[i];
  }
}

#if defined(__x86_64__)

__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Two key rows at a time with four accumulators each: eight independent FMA chains, q loaded once.
__attribute__((target("avx2,fma"))) inline void dot_rows_avx2(float* out, const float* q, const float* const* rows,
                                                              int n, int64_t d) {
  const int64_t d32 = d & ~int64_t(31), d8 = d & ~int64_t(7);
  int j = 0;
  for (; j + 2 <= n; j += 2) {
    const float* a = rows[j];
    const float* b = rows[j + 1];
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    int64_t i = 0;
    for (; i < d32; i += 32) {
      __m256 q0 = _mm256_loadu_ps(q + i), q1 = _mm256_loadu_ps(q + i + 8);
      __m256 q2 = _mm256_loadu_ps(q + i + 16), q3 = _mm256_loadu_ps(q + i + 24);
      a0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(a + i), a0);
      a1 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(a + i + 8), a1);
      a2 = _mm256_fmadd_ps(q2, _mm256_loadu_ps(a + i + 16), a2);
      a3 = _mm256_fmadd_ps(q3, _mm256_loadu_ps(a + i + 24), a3);
      b0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(b + i), b0);
      b1 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(b + i + 8), b1);
      b2 = _mm256_fmadd_ps(q2, _mm256_loadu_ps(b + i + 16), b2);
      b3 = _mm256_fmadd_ps(q3, _mm256_loadu_ps(b + i + 24), b3);
    }
    for (; i < d8; i += 8) {
      __m256 q0 = _mm256_loadu_ps(q + i);
      a0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(a + i), a0);
      b0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(b + i), b0);
    }
    float sa = hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    float sb = hsum256(_mm256_add_ps(_mm256_add_ps(b0, b1), _mm256_add_ps(b2, b3)));
    for (; i < d; ++i) {
      sa += q[i] * a[i];
      sb += q[i] * b[i];
    }
    out[j] = sa;
    out[j + 1] = sb;
  }
  for (; j < n; ++j) {
    const float* a = rows[j];
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i < d32; i += 32) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(a + i), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(a + i + 8), a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 16), _mm256_loadu_ps(a + i + 16), a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 24), _mm256_loadu_ps(a + i + 24), a3);
    }
    for (; i < d8; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(a + i), a0);
    float sa = hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < d; ++i) sa += q[i] * a[i];
    out[j] = sa;
  }
}

// acc is held in registers 64 floats at a time while every row of the tile is added into it.
__attribute__((target("avx2,fma"))) inline void accumulate_rows_avx2(float* acc, const float* w,
                                                                     const float* const* rows, int n, int64_t d) {
  const int64_t d64 = d & ~int64_t(63), d8 = d & ~int64_t(7);
  int64_t i = 0;
  for (; i < d64; i += 64) {
    __m256 c0 = _mm256_loadu_ps(acc + i), c1 = _mm256_loadu_ps(acc + i + 8);
    __m256 c2 = _mm256_loadu_ps(acc + i + 16), c3 = _mm256_loadu_ps(acc + i + 24);
    __m256 c4 = _mm256_loadu_ps(acc + i + 32), c5 = _mm256_loadu_ps(acc + i + 40);
    __m256 c6 = _mm256_loadu_ps(acc + i + 48), c7 = _mm256_loadu_ps(acc + i + 56);
    for (int j = 0; j < n; ++j) {
      const __m256 wj = _mm256_set1_ps(w[j]);
      const float* r = rows[j] + i;
      c0 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(r), c0);
      c1 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(r + 8), c1);
      c2 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(r + 16), c2);
      c3 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(r + 24), c3);
      c4 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(r + 32), c4);
      c5 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(r + 40), c5);
      c6 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(r + 48), c6);
      c7 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(r + 56), c7);
    }
    _mm256_storeu_ps(acc + i, c0);
    _mm256_storeu_ps(acc + i + 8, c1);
    _mm256_storeu_ps(acc + i + 16, c2);
    _mm256_storeu_ps(acc + i + 24, c3);
    _mm256_storeu_ps(acc + i + 32, c4);
    _mm256_storeu_ps(acc + i + 40, c5);
    _mm256_storeu_ps(acc + i + 48, c6);
    _mm256_storeu_ps(acc + i + 56, c7);
  }
  for (; i < d8; i += 8) {
    __m256 c0 = _mm256_loadu_ps(acc + i);
    for (int j = 0; j < n; ++j) c0 = _mm256_fmadd_ps(_mm256_set1_ps(w[j]), _mm256_loadu_ps(rows[j] + i), c0);
    _mm256_storeu_ps(acc + i, c0);
  }
  for (; i < d; ++i) {
    float c = acc[i];
    for (int j = 0; j < n; ++j) c += w[j] * rows[j][i];
    acc[i] = c;
  }
}

#endif  // __x86_64__

struct Kernels {
  DotRowsFn dot_rows;
  AccumulateRowsFn accumulate_rows;
  const char* name;
};

// Chosen once per process: AVX2+FMA when the CPU has both, else the portable loops.
inline const Kernels& kernels() {
  static const Kernels k = [] {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return Kernels{dot_rows_avx2, accumulate_rows_avx2, "avx2"};
#endif
    return Kernels{dot_rows_portable, accumulate_rows_portable, "portable"};
  }();
  return k;
}

}  // namespace mb::cpu::attn_simd
