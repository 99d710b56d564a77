// Inner loops of the fast attention kernel over one tile of gathered key / value rows, for the `nh`
// query heads that share one kv head (GQA), so each K / V row is loaded once for several heads.
// A portable version and an AVX2+FMA version (selected at run time by kernels()). f32 math throughout.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mb::cpu::attn_simd {

// logit[h·ld + j] = Σ_i q[h·d + i]·rows[j][i]          for h < nh, j < n
using DotHeadsFn = void (*)(float* logit, int64_t ld, const float* q, int nh, const float* const* rows, int n,
                            int64_t d);
// acc[h·d + i] += Σ_j w[h·ld + j]·rows[j][i]           for h < nh, i < d
using AccumulateHeadsFn = void (*)(float* acc, const float* w, int64_t ld, int nh, const float* const* rows, int n,
                                   int64_t d);

inline void dot_heads_portable(float* logit, int64_t ld, const float* q, int nh, const float* const* rows, int n,
                               int64_t d) {
  for (int h = 0; h < nh; ++h)
    for (int j = 0; j < n; ++j) {
      const float* qh = q + h * d;
      const float* r = rows[j];
      float s = 0.f;
      for (int64_t i = 0; i < d; ++i) s += qh[i] * r[i];
      logit[h * ld + j] = s;
    }
}

inline void accumulate_heads_portable(float* acc, const float* w, int64_t ld, int nh, const float* const* rows,
                                      int n, int64_t d) {
  for (int h = 0; h < nh; ++h)
    for (int j = 0; j < n; ++j) {
      const float wj = w[h * ld + j];
      const float* r = rows[j];
      float* a = acc + h * d;
      for (int64_t i = 0; i < d; ++i) a[i] += wj * r[i];
    }
}

#if defined(__x86_64__)

#define MB_AVX2 __attribute__((target("avx2,fma")))

// [Σa, Σb, Σc, Σd] of four 8-lane vectors.
MB_AVX2 inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

MB_AVX2 inline float hsum1(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Register tile of NH heads × 4 keys: NH·4 independent FMA chains, (NH + 4) loads per NH·4 FMAs.
template <int NH>
MB_AVX2 inline void dot_tile4(float* logit, int64_t ld, const float* q, const float* const* r, int64_t d) {
  const int64_t d8 = d & ~int64_t(7);
  __m256 c[NH][4];
  for (int h = 0; h < NH; ++h)
    for (int k = 0; k < 4; ++k) c[h][k] = _mm256_setzero_ps();
  for (int64_t i = 0; i < d8; i += 8) {
    const __m256 k0 = _mm256_loadu_ps(r[0] + i), k1 = _mm256_loadu_ps(r[1] + i);
    const __m256 k2 = _mm256_loadu_ps(r[2] + i), k3 = _mm256_loadu_ps(r[3] + i);
    for (int h = 0; h < NH; ++h) {
      const __m256 qh = _mm256_loadu_ps(q + h * d + i);
      c[h][0] = _mm256_fmadd_ps(qh, k0, c[h][0]);
      c[h][1] = _mm256_fmadd_ps(qh, k1, c[h][1]);
      c[h][2] = _mm256_fmadd_ps(qh, k2, c[h][2]);
      c[h][3] = _mm256_fmadd_ps(qh, k3, c[h][3]);
    }
  }
  for (int h = 0; h < NH; ++h) {
    alignas(16) float s[4];
    _mm_store_ps(s, hsum4(c[h][0], c[h][1], c[h][2], c[h][3]));
    const float* qh = q + h * d;
    for (int k = 0; k < 4; ++k) {
      for (int64_t i = d8; i < d; ++i) s[k] += qh[i] * r[k][i];
      logit[h * ld + k] = s[k];
    }
  }
}

// One key against one head, four chains.
MB_AVX2 inline float dot1(const float* q, const float* r, int64_t d) {
  const int64_t d32 = d & ~int64_t(31), d8 = d & ~int64_t(7);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i < d32; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(r + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(r + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 16), _mm256_loadu_ps(r + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 24), _mm256_loadu_ps(r + i + 24), a3);
  }
  for (; i < d8; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(r + i), a0);
  float s = hsum1(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < d; ++i) s += q[i] * r[i];
  return s;
}

// Keys outer, heads inner: four key rows stay in L1 while every head of the group uses them.
MB_AVX2 inline void dot_heads_avx2(float* logit, int64_t ld, const float* q, int nh, const float* const* rows, int n,
                                   int64_t d) {
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    int h = 0;
    for (; h + 2 <= nh; h += 2) dot_tile4<2>(logit + h * ld + j, ld, q + h * d, rows + j, d);
    if (h < nh) dot_tile4<1>(logit + h * ld + j, ld, q + h * d, rows + j, d);
  }
  for (; j < n; ++j)
    for (int h = 0; h < nh; ++h) logit[h * ld + j] = dot1(q + h * d, rows[j], d);
}

// Register tile of NH heads × NV·8 output floats held across all n rows, NH·NV = 8 chains.
template <int NH, int NV>
MB_AVX2 inline void accumulate_tile(float* acc, const float* w, int64_t ld, const float* const* rows, int n, int64_t d,
                                    int64_t i) {
  __m256 c[NH][NV];
  for (int h = 0; h < NH; ++h)
    for (int v = 0; v < NV; ++v) c[h][v] = _mm256_loadu_ps(acc + h * d + i + 8 * v);
  for (int j = 0; j < n; ++j) {
    const float* r = rows[j] + i;
    __m256 x[NV];
    for (int v = 0; v < NV; ++v) x[v] = _mm256_loadu_ps(r + 8 * v);
    for (int h = 0; h < NH; ++h) {
      const __m256 wh = _mm256_broadcast_ss(w + h * ld + j);
      for (int v = 0; v < NV; ++v) c[h][v] = _mm256_fmadd_ps(wh, x[v], c[h][v]);
    }
  }
  for (int h = 0; h < NH; ++h)
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(acc + h * d + i + 8 * v, c[h][v]);
}

// Columns [i0, d) of NH heads that do not fill a 64-float stripe: 8-float tiles, then scalars.
template <int NH>
MB_AVX2 inline void accumulate_tail(float* acc, const float* w, int64_t ld, const float* const* rows, int n, int64_t d,
                                    int64_t i0) {
  const int64_t d8 = d & ~int64_t(7);
  int64_t i = i0;
  for (; i < d8; i += 8) accumulate_tile<NH, 1>(acc, w, ld, rows, n, d, i);
  for (; i < d; ++i)
    for (int h = 0; h < NH; ++h) {
      float s = acc[h * d + i];
      for (int j = 0; j < n; ++j) s += w[h * ld + j] * rows[j][i];
      acc[h * d + i] = s;
    }
}

// 64-float column stripes outer, head blocks inner: a stripe of the value rows stays in L1 while
// every head of the group accumulates it (4 heads × 16 floats, 2 × 32 or 1 × 64: eight chains).
MB_AVX2 inline void accumulate_heads_avx2(float* acc, const float* w, int64_t ld, int nh, const float* const* rows,
                                          int n, int64_t d) {
  const int64_t d64 = d & ~int64_t(63);
  for (int64_t i = 0; i < d64; i += 64) {
    int h = 0;
    for (; h + 4 <= nh; h += 4)
      for (int64_t c = 0; c < 64; c += 16) accumulate_tile<4, 2>(acc + h * d, w + h * ld, ld, rows, n, d, i + c);
    for (; h + 2 <= nh; h += 2)
      for (int64_t c = 0; c < 64; c += 32) accumulate_tile<2, 4>(acc + h * d, w + h * ld, ld, rows, n, d, i + c);
    if (h < nh) accumulate_tile<1, 8>(acc + h * d, w + h * ld, ld, rows, n, d, i);
  }
  if (d64 == d) return;
  int h = 0;
  for (; h + 4 <= nh; h += 4) accumulate_tail<4>(acc + h * d, w + h * ld, ld, rows, n, d, d64);
  for (; h + 2 <= nh; h += 2) accumulate_tail<2>(acc + h * d, w + h * ld, ld, rows, n, d, d64);
  if (h < nh) accumulate_tail<1>(acc + h * d, w + h * ld, ld, rows, n, d, d64);
}

#undef MB_AVX2

#endif  // __x86_64__

struct Kernels {
  DotHeadsFn dot_heads;
  AccumulateHeadsFn accumulate_heads;
  const char* name;
};

// Chosen once per process: AVX2+FMA when the CPU has both, else the portable loops.
// MARKBASE_ATTENTION_SIMD=portable forces the portable loops (to test them on an AVX2 machine).
inline const Kernels& kernels() {
  static const Kernels k = [] {
    const char* force = std::getenv("MARKBASE_ATTENTION_SIMD");
    if (force && std::strcmp(force, "portable") == 0) return Kernels{dot_heads_portable, accumulate_heads_portable, "portable"};
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return Kernels{dot_heads_avx2, accumulate_heads_avx2, "avx2"};
#endif
    return Kernels{dot_heads_portable, accumulate_heads_portable, "portable"};
  }();
  return k;
}

}  // namespace mb::cpu::attn_simd
