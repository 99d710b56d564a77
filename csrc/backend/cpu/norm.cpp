// Row normalisations. Reference: one scalar pass per statistic, f32 sequential sums, rows in order.
// Fast: rows across the pool; on AVX2 machines 8-lane loads of any storage type, 4 independent
// accumulators per sum, and the same per-element operation order as the reference for the output
// ((x·r)·w for RMSNorm, ((x − mean)·rstd)·w + b for LayerNorm), so only the sums' order differs.
#include "backend/cpu/norm.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/norm_simd.h"
#include "core/thread_pool.h"

namespace mb::cpu {
namespace {

// Storage type of the optional [D] parameters: the one given, or f32 as a placeholder if none is.
DType param_dtype(const Tensor& a, const Tensor& b = {}) {
  if (a.defined()) return a.dtype();
  if (b.defined()) return b.dtype();
  return DType::F32;
}

template <class P>
const P* param_ptr(const Tensor& t) {
  return t.defined() ? t.data_as<const P>() : nullptr;
}

// Calls row_fn(r) for every row r of a [rows, D] problem, rows split across the pool.
template <class RowFn>
void for_each_row(int64_t rows, int64_t D, const RowFn& row_fn) {
  parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / D), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) row_fn(r);
  });
}

// ---- RMSNorm ---------------------------------------------------------------------------------

// y = x · (mean(x²) + eps)^-0.5 · w. torch.pow(v, -0.5) on f32 is 1 / sqrt(v), so is this.
template <class T, class W>
void rms_row_scalar(const T* x, const W* w, T* y, int64_t D, float eps) {
  float sum_sq = 0.f;
  for (int64_t i = 0; i < D; ++i) {
    const float v = load_f32(x + i);
    sum_sq += v * v;
  }
  const float r = 1.f / std::sqrt(sum_sq / float(D) + eps);
  for (int64_t i = 0; i < D; ++i) {
    float v = load_f32(x + i) * r;
    if (w) v = v * load_f32(w + i);
    store_f32(y + i, v);
  }
}

#if defined(__x86_64__)
using namespace norm_simd;

template <class T>
MB_NORM_AVX2 float sum_squares_avx2(const T* x, int64_t D) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= D; i += 32) {
    const __m256 v0 = load8(x + i), v1 = load8(x + i + 8), v2 = load8(x + i + 16), v3 = load8(x + i + 24);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
    a2 = _mm256_fmadd_ps(v2, v2, a2);
    a3 = _mm256_fmadd_ps(v3, v3, a3);
  }
  for (; i + 8 <= D; i += 8) {
    const __m256 v = load8(x + i);
    a0 = _mm256_fmadd_ps(v, v, a0);
  }
  float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < D; ++i) {
    const float v = load_f32(x + i);
    s += v * v;
  }
  return s;
}

template <class T, class W>
MB_NORM_AVX2 void rms_row_avx2(const T* x, const W* w, T* y, int64_t D, float eps) {
  const float r = 1.f / std::sqrt(sum_squares_avx2(x, D) / float(D) + eps);
  const __m256 rv = _mm256_set1_ps(r);
  int64_t i = 0;
  if (w) {
    for (; i + 8 <= D; i += 8) store8(y + i, _mm256_mul_ps(_mm256_mul_ps(load8(x + i), rv), load8(w + i)));
    for (; i < D; ++i) store_f32(y + i, (load_f32(x + i) * r) * load_f32(w + i));
  } else {
    for (; i + 8 <= D; i += 8) store8(y + i, _mm256_mul_ps(load8(x + i), rv));
    for (; i < D; ++i) store_f32(y + i, load_f32(x + i) * r);
  }
}
#endif

// ---- LayerNorm -------------------------------------------------------------------------------

// Two passes (mean, then the biased variance of x − mean): no cancellation when |mean| ≫ std.
template <class T, class P>
void ln_row_scalar(const T* x, const P* w, const P* b, T* y, int64_t D, float eps) {
  float sum = 0.f;
  for (int64_t i = 0; i < D; ++i) sum += load_f32(x + i);
  const float mean = sum / float(D);
  float sum_sq = 0.f;
  for (int64_t i = 0; i < D; ++i) {
    const float c = load_f32(x + i) - mean;
    sum_sq += c * c;
  }
  const float rstd = 1.f / std::sqrt(sum_sq / float(D) + eps);
  for (int64_t i = 0; i < D; ++i) {
    float v = (load_f32(x + i) - mean) * rstd;
    if (w) v = v * load_f32(w + i);
    if (b) v = v + load_f32(b + i);
    store_f32(y + i, v);
  }
}

#if defined(__x86_64__)
template <class T, class P>
MB_NORM_AVX2 void ln_row_avx2(const T* x, const P* w, const P* b, T* y, int64_t D, float eps) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= D; i += 32) {
    s0 = _mm256_add_ps(s0, load8(x + i));
    s1 = _mm256_add_ps(s1, load8(x + i + 8));
    s2 = _mm256_add_ps(s2, load8(x + i + 16));
    s3 = _mm256_add_ps(s3, load8(x + i + 24));
  }
  for (; i + 8 <= D; i += 8) s0 = _mm256_add_ps(s0, load8(x + i));
  float sum = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < D; ++i) sum += load_f32(x + i);
  const float mean = sum / float(D);

  const __m256 mv = _mm256_set1_ps(mean);
  s0 = s1 = s2 = s3 = _mm256_setzero_ps();
  i = 0;
  for (; i + 32 <= D; i += 32) {
    const __m256 c0 = _mm256_sub_ps(load8(x + i), mv), c1 = _mm256_sub_ps(load8(x + i + 8), mv);
    const __m256 c2 = _mm256_sub_ps(load8(x + i + 16), mv), c3 = _mm256_sub_ps(load8(x + i + 24), mv);
    s0 = _mm256_fmadd_ps(c0, c0, s0);
    s1 = _mm256_fmadd_ps(c1, c1, s1);
    s2 = _mm256_fmadd_ps(c2, c2, s2);
    s3 = _mm256_fmadd_ps(c3, c3, s3);
  }
  for (; i + 8 <= D; i += 8) {
    const __m256 c = _mm256_sub_ps(load8(x + i), mv);
    s0 = _mm256_fmadd_ps(c, c, s0);
  }
  float sum_sq = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < D; ++i) {
    const float c = load_f32(x + i) - mean;
    sum_sq += c * c;
  }
  const float rstd = 1.f / std::sqrt(sum_sq / float(D) + eps);

  const __m256 rv = _mm256_set1_ps(rstd);
  i = 0;
  for (; i + 8 <= D; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_sub_ps(load8(x + i), mv), rv);
    if (w) v = _mm256_mul_ps(v, load8(w + i));
    if (b) v = _mm256_add_ps(v, load8(b + i));
    store8(y + i, v);
  }
  for (; i < D; ++i) {
    float v = (load_f32(x + i) - mean) * rstd;
    if (w) v = v * load_f32(w + i);
    if (b) v = v + load_f32(b + i);
    store_f32(y + i, v);
  }
}
#endif

// ---- Row loops -------------------------------------------------------------------------------

// Calls row(x_row, w, b, y_row, D) for every row of x / out ([rows, D]), with x's storage type and the
// parameters' (w and b are null when absent; b always is for RMSNorm): rows in order for the reference
// kernels, split across the pool for the fast ones.
template <class Row>
void for_each_norm_row(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out, bool parallel,
                       const Row& row) {
  const int64_t D = x.size(-1), rows = x.numel() / D;
  dispatch_float(x.dtype(), [&](auto xtag) {
    using T = decltype(xtag);
    dispatch_float(param_dtype(weight, bias), [&](auto ptag) {
      using P = decltype(ptag);
      const T* xs = x.data_as<const T>();
      T* ys = out.data_as<T>();
      const P* w = param_ptr<P>(weight);
      const P* b = param_ptr<P>(bias);
      const auto one = [&](int64_t r) { row(xs + r * D, w, b, ys + r * D, D); };
      if (parallel) {
        for_each_row(rows, D, one);
      } else {
        for (int64_t r = 0; r < rows; ++r) one(r);
      }
    });
  });
}

}  // namespace

void rms_norm_ref(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  for_each_norm_row(x, weight, Tensor(), out, /*parallel=*/false,
                    [&](const auto* xr, const auto* w, const auto*, auto* yr, int64_t D) {
                      rms_row_scalar(xr, w, yr, D, eps);
                    });
}

void rms_norm_fast(const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  [[maybe_unused]] const bool simd = norm_simd::available();
  for_each_norm_row(x, weight, Tensor(), out, /*parallel=*/true,
                    [&](const auto* xr, const auto* w, const auto*, auto* yr, int64_t D) {
#if defined(__x86_64__)
                      if (simd) return rms_row_avx2(xr, w, yr, D, eps);
#endif
                      rms_row_scalar(xr, w, yr, D, eps);
                    });
}

void layer_norm_ref(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out) {
  for_each_norm_row(x, weight, bias, out, /*parallel=*/false,
                    [&](const auto* xr, const auto* w, const auto* b, auto* yr, int64_t D) {
                      ln_row_scalar(xr, w, b, yr, D, eps);
                    });
}

void layer_norm_fast(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out) {
  [[maybe_unused]] const bool simd = norm_simd::available();
  for_each_norm_row(x, weight, bias, out, /*parallel=*/true,
                    [&](const auto* xr, const auto* w, const auto* b, auto* yr, int64_t D) {
#if defined(__x86_64__)
                      if (simd) return ln_row_avx2(xr, w, b, yr, D, eps);
#endif
                      ln_row_scalar(xr, w, b, yr, D, eps);
                    });
}

}  // namespace mb::cpu
