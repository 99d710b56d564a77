// Elementwise kernels. Reference: one scalar loop. Fast: chunks across the pool, with f32 inner loops
// written so the compiler vectorises the cheap kinds (relu, clamp, scale, add, mul), and on AVX2 an
// 8-lane tanh (norm_simd.h) for gelu_tanh and softcap: std::tanh per element cost ~20 us per decode MLP
// and ~1 ms for the logits' softcap. Same formulas as the scalar path; only tanh's last ulps differ.
#include "backend/cpu/elementwise.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/norm_simd.h"
#include "backend/cpu/simd.h"
#include "core/thread_pool.h"

namespace mb::cpu {

using ops::BinaryKind;
using ops::UnaryKind;
using ops::UnaryParams;

static inline float apply_unary(float v, const UnaryParams& p) {
  switch (p.kind) {
    case UnaryKind::GeluTanh: return gelu_tanh_f(v);
    case UnaryKind::Silu: return silu_f(v);
    case UnaryKind::Relu: return v > 0.f ? v : (v == v ? 0.f : v);  // NaN propagates
    case UnaryKind::Sigmoid: return sigmoid_f(v);
    case UnaryKind::Softplus: return softplus_f(v);
    case UnaryKind::Softcap: return p.a * std::tanh(v / p.a);
    case UnaryKind::Clamp: return v < p.a ? p.a : (v > p.b ? p.b : v);  // NaN propagates
    case UnaryKind::Scale: return v * p.a;
  }
  return v;
}

void unary_ref(const Tensor& x, Tensor& out, const UnaryParams& p) {
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.data_as<const T>();
    T* ys = out.data_as<T>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) store_f32(ys + i, apply_unary(load_f32(xs + i), p));
  });
}

// One contiguous f32 span per kind, so each loop body is branch-free and vectorisable.
template <UnaryKind K>
static void unary_span_f32(const float* x, float* y, int64_t n, const UnaryParams& p) {
  UnaryParams q = p;
  q.kind = K;
  for (int64_t i = 0; i < n; ++i) y[i] = apply_unary(x[i], q);
}

#if defined(__x86_64__)
// gelu_tanh / softcap over f32 spans, 8 lanes at a time; the tail goes through apply_unary.
MB_NORM_AVX2 static void tanh_kinds_avx2(const float* x, float* y, int64_t n, const UnaryParams& p) {
  using namespace norm_simd;
  int64_t i = 0;
  if (p.kind == UnaryKind::GeluTanh) {
    const __m256 k = _mm256_set1_ps(0.7978845608028654f), c = _mm256_set1_ps(0.044715f);
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.f);
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(c, v), v), v);
      const __m256 t = tanh8(_mm256_mul_ps(k, _mm256_add_ps(v, cube)));
      _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, t)));
    }
  } else {  // Softcap: a·tanh(v / a)
    const __m256 a = _mm256_set1_ps(p.a);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(a, tanh8(_mm256_div_ps(_mm256_loadu_ps(x + i), a))));
  }
  for (; i < n; ++i) y[i] = apply_unary(x[i], p);
}
#endif

static void unary_span_f32_dispatch(const float* x, float* y, int64_t n, const UnaryParams& p) {
#if defined(__x86_64__)
  if ((p.kind == UnaryKind::GeluTanh || p.kind == UnaryKind::Softcap) && cpu_has_avx2())
    return tanh_kinds_avx2(x, y, n, p);
#endif
  switch (p.kind) {
    case UnaryKind::GeluTanh: return unary_span_f32<UnaryKind::GeluTanh>(x, y, n, p);
    case UnaryKind::Silu: return unary_span_f32<UnaryKind::Silu>(x, y, n, p);
    case UnaryKind::Relu: return unary_span_f32<UnaryKind::Relu>(x, y, n, p);
    case UnaryKind::Sigmoid: return unary_span_f32<UnaryKind::Sigmoid>(x, y, n, p);
    case UnaryKind::Softplus: return unary_span_f32<UnaryKind::Softplus>(x, y, n, p);
    case UnaryKind::Softcap: return unary_span_f32<UnaryKind::Softcap>(x, y, n, p);
    case UnaryKind::Clamp: return unary_span_f32<UnaryKind::Clamp>(x, y, n, p);
    case UnaryKind::Scale: return unary_span_f32<UnaryKind::Scale>(x, y, n, p);
  }
}

void unary_fast(const Tensor& x, Tensor& out, const UnaryParams& p) {
  const int64_t n = x.numel();
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.data_as<const T>();
    T* ys = out.data_as<T>();
    parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>) {
        unary_span_f32_dispatch(xs + b, ys + b, e - b, p);
      } else {
        // Convert through a small f32 tile so the math loop stays vectorisable.
        float tile[256];
        for (int64_t s = b; s < e; s += 256) {
          int64_t m = std::min<int64_t>(256, e - s);
          for (int64_t i = 0; i < m; ++i) tile[i] = load_f32(xs + s + i);
          unary_span_f32_dispatch(tile, tile, m, p);
          for (int64_t i = 0; i < m; ++i) store_f32(ys + s + i, tile[i]);
        }
      }
    });
  });
}

static inline float apply_binary(float a, float b, BinaryKind k) { return k == BinaryKind::Add ? a + b : a * b; }

void binary_ref(const Tensor& a, const Tensor& b, Tensor& out, BinaryKind k) {
  const int64_t n = a.numel(), nb = b.numel();
  dispatch_float(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* as = a.data_as<const T>();
    const T* bs = b.data_as<const T>();
    T* ys = out.data_as<T>();
    for (int64_t i = 0; i < n; ++i) store_f32(ys + i, apply_binary(load_f32(as + i), load_f32(bs + i % nb), k));
  });
}

void binary_fast(const Tensor& a, const Tensor& b, Tensor& out, BinaryKind k) {
  const int64_t n = a.numel(), nb = b.numel();
  dispatch_float(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* as = a.data_as<const T>();
    const T* bs = b.data_as<const T>();
    T* ys = out.data_as<T>();
    if (nb == n || nb == 1) {
      parallel_for(n, kElementwiseGrain, [&](int64_t s, int64_t e) {
        if (nb == 1) {
          const float bv = load_f32(bs);
          if (k == BinaryKind::Add) for (int64_t i = s; i < e; ++i) store_f32(ys + i, load_f32(as + i) + bv);
          else for (int64_t i = s; i < e; ++i) store_f32(ys + i, load_f32(as + i) * bv);
        } else {
          if (k == BinaryKind::Add) for (int64_t i = s; i < e; ++i) store_f32(ys + i, load_f32(as + i) + load_f32(bs + i));
          else for (int64_t i = s; i < e; ++i) store_f32(ys + i, load_f32(as + i) * load_f32(bs + i));
        }
      });
      return;
    }
    // Row broadcast: b is one row of nb elements, repeated over n / nb rows.
    const int64_t rows = n / nb;
    parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / nb), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* ar = as + r * nb;
        T* yr = ys + r * nb;
        if (k == BinaryKind::Add) for (int64_t i = 0; i < nb; ++i) store_f32(yr + i, load_f32(ar + i) + load_f32(bs + i));
        else for (int64_t i = 0; i < nb; ++i) store_f32(yr + i, load_f32(ar + i) * load_f32(bs + i));
      }
    });
  });
}

}  // namespace mb::cpu
