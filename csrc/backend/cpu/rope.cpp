// Rotary embeddings. Every variant uses the same scalar steps, matching HF in f32:
//   ang = f32(pos) · inv[j] (one f32 multiply), c = std::cos(ang), s = std::sin(ang) (f32),
//   first = a·c − b·s, second = b·c + a·s (HF's x·cos + rotate_half(x)·sin, no fused multiply-add).
// Reference: recomputes cos / sin for every (token, head, pair). Fast: tokens across the pool, cos / sin
// once per token into a per-thread table, then every head rotated with 8-lane AVX2 arithmetic doing the
// same operations, so fast and reference agree bit for bit.
#include "backend/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/norm_simd.h"
#include "core/thread_pool.h"

namespace mb::cpu {
namespace {

// Element (i, k) of an integer positions tensor ([T] or [N, 2]), any strides.
int64_t position_at(const Tensor& p, int64_t i, int64_t k = 0) {
  int64_t off = i * p.stride(0) + (p.dim() > 1 ? k * p.stride(1) : 0);
  return p.dtype() == DType::I32 ? int64_t(p.data_as<const int32_t>()[off]) : p.data_as<const int64_t>()[off];
}

// torch's position_ids.float(): round to nearest f32.
inline float position_f32(int64_t pos) { return static_cast<float>(pos); }

// Rotates pairs (i, i + n), i < n, of one head chunk: y[i] = a·c − b·s, y[i+n] = b·c + a·s.
template <class T>
inline void rotate_pair(const T* x, T* y, int64_t i, int64_t n, float c, float s) {
  const float a = load_f32(x + i), b = load_f32(x + i + n);
  store_f32(y + i, a * c - b * s);
  store_f32(y + i + n, b * c + a * s);
}

template <class T>
void rotate_span_scalar(const T* x, T* y, int64_t n, const float* c, const float* s) {
  for (int64_t i = 0; i < n; ++i) rotate_pair(x, y, i, n, c[i], s[i]);
}

#if defined(__x86_64__)
using namespace norm_simd;

template <class T>
MB_NORM_AVX2 void rotate_span_avx2(const T* x, T* y, int64_t n, const float* c, const float* s) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = load8(x + i), b = load8(x + i + n);
    const __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
    // Both halves are read before either is written, so exact in-place use is safe.
    store8(y + i, _mm256_sub_ps(_mm256_mul_ps(a, cv), _mm256_mul_ps(b, sv)));
    store8(y + i + n, _mm256_add_ps(_mm256_mul_ps(b, cv), _mm256_mul_ps(a, sv)));
  }
  for (; i < n; ++i) rotate_pair(x, y, i, n, c[i], s[i]);
}
#endif

template <class T>
void rotate_span(bool simd, const T* x, T* y, int64_t n, const float* c, const float* s) {
#if defined(__x86_64__)
  if (simd) return rotate_span_avx2(x, y, n, c, s);
#endif
  rotate_span_scalar(x, y, n, c, s);
}

// Dims [from, d) are not rotated: copied unchanged.
template <class T>
void copy_tail(const T* x, T* y, int64_t from, int64_t d) {
  if (from < d && x != y) std::memcpy(y + from, x + from, size_t(d - from) * sizeof(T));
}

// Per-thread scratch for the cos / sin tables (grows once, then no allocation per call).
float* table(int64_t n) {
  static thread_local std::vector<float> buf;
  if (int64_t(buf.size()) < n) buf.resize(size_t(n));
  return buf.data();
}

void fill_cos_sin(float fpos, const float* inv, int64_t n, float* c, float* s) {
  for (int64_t j = 0; j < n; ++j) {
    const float ang = fpos * inv[j];
    c[j] = std::cos(ang);
    s[j] = std::sin(ang);
  }
}

}  // namespace

void rope_ref(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& out) {
  const int64_t T = x.size(0), H = x.size(1), d = x.size(2), n = inv_freq.size(0);
  const float* inv = inv_freq.data_as<const float>();
  dispatch_float(x.dtype(), [&](auto tag) {
    using E = decltype(tag);
    for (int64_t t = 0; t < T; ++t) {
      const float fpos = position_f32(position_at(positions, t));
      for (int64_t h = 0; h < H; ++h) {
        const E* xh = x.data_as<const E>() + t * x.stride(0) + h * x.stride(1);
        E* yh = out.data_as<E>() + (t * H + h) * d;
        for (int64_t i = 0; i < n; ++i) {
          const float ang = fpos * inv[i];
          rotate_pair(xh, yh, i, n, std::cos(ang), std::sin(ang));
        }
        for (int64_t i = 2 * n; i < d; ++i) store_f32(yh + i, load_f32(xh + i));
      }
    }
  });
}

void rope_fast(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& out) {
  const int64_t T = x.size(0), H = x.size(1), d = x.size(2), n = inv_freq.size(0);
  const float* inv = inv_freq.data_as<const float>();
  const bool simd = norm_simd::available();
  dispatch_float(x.dtype(), [&](auto tag) {
    using E = decltype(tag);
    parallel_for(T, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, H * d)), [&](int64_t t0, int64_t t1) {
      float* c = table(2 * n);
      float* s = c + n;
      for (int64_t t = t0; t < t1; ++t) {
        fill_cos_sin(position_f32(position_at(positions, t)), inv, n, c, s);
        for (int64_t h = 0; h < H; ++h) {
          const E* xh = x.data_as<const E>() + t * x.stride(0) + h * x.stride(1);
          E* yh = out.data_as<E>() + (t * H + h) * d;
          rotate_span(simd, xh, yh, n, c, s);
          copy_tail(xh, yh, 2 * n, d);
        }
      }
    });
  });
}

void rope_2d_ref(const Tensor& x, const Tensor& positions, const float* inv, Tensor& out) {
  const int64_t N = x.size(0), H = x.size(1), d = x.size(2), half = d / 2, q = half / 2;
  dispatch_float(x.dtype(), [&](auto tag) {
    using E = decltype(tag);
    for (int64_t t = 0; t < N; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const E* xh = x.data_as<const E>() + t * x.stride(0) + h * x.stride(1);
        E* yh = out.data_as<E>() + (t * H + h) * d;
        // Chunk k (k = 0: dims [0, half), k = 1: dims [half, d)) rotates with position component k.
        for (int64_t k = 0; k < 2; ++k) {
          const float fpos = position_f32(position_at(positions, t, k));
          for (int64_t i = 0; i < q; ++i) {
            const float ang = fpos * inv[i];
            rotate_pair(xh + k * half, yh + k * half, i, q, std::cos(ang), std::sin(ang));
          }
        }
      }
    }
  });
}

void rope_2d_fast(const Tensor& x, const Tensor& positions, const float* inv, Tensor& out) {
  const int64_t N = x.size(0), H = x.size(1), d = x.size(2), half = d / 2, q = half / 2;
  const bool simd = norm_simd::available();
  dispatch_float(x.dtype(), [&](auto tag) {
    using E = decltype(tag);
    parallel_for(N, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, H * d)), [&](int64_t t0, int64_t t1) {
      float* cx = table(4 * q);
      float *sx = cx + q, *cy = cx + 2 * q, *sy = cx + 3 * q;
      for (int64_t t = t0; t < t1; ++t) {
        fill_cos_sin(position_f32(position_at(positions, t, 0)), inv, q, cx, sx);
        fill_cos_sin(position_f32(position_at(positions, t, 1)), inv, q, cy, sy);
        for (int64_t h = 0; h < H; ++h) {
          const E* xh = x.data_as<const E>() + t * x.stride(0) + h * x.stride(1);
          E* yh = out.data_as<E>() + (t * H + h) * d;
          rotate_span(simd, xh, yh, q, cx, sx);
          rotate_span(simd, xh + half, yh + half, q, cy, sy);
        }
      }
    });
  });
}

}  // namespace mb::cpu
