// Softmax over the last dimension. Reference: scalar max, std::exp, sequential f32 sum, e / sum.
// Fast: rows across the pool; on AVX2, vector max with NaN detection, a polynomial e^x (~2 ulp of
// std::exp) whose values are kept in f32 (in `out` itself for f32 storage, else a per-thread buffer),
// then one multiply by 1/sum. Rows with NaN / ±inf maxima take the reference path (same results).
#include "backend/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/norm_simd.h"
#include "core/thread_pool.h"

namespace mb::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

template <class T>
void fill_row(T* y, int64_t D, float v) {
  for (int64_t i = 0; i < D; ++i) store_f32(y + i, v);
}

template <class T>
void softmax_row_scalar(const T* x, T* y, int64_t D) {
  float m = -kInf;
  bool has_nan = false;
  for (int64_t i = 0; i < D; ++i) {
    const float v = load_f32(x + i);
    if (v != v) has_nan = true;
    else if (v > m) m = v;
  }
  if (has_nan) return fill_row(y, D, kNaN);  // NaN propagates to the whole row, as torch
  if (m == -kInf) return fill_row(y, D, 0.f);  // fully masked row: zeros by definition, not NaN
  // m = +inf gives inf − inf = NaN terms, so the row becomes NaN (as torch) without a special case.
  float sum = 0.f;
  for (int64_t i = 0; i < D; ++i) sum += std::exp(load_f32(x + i) - m);
  for (int64_t i = 0; i < D; ++i) store_f32(y + i, std::exp(load_f32(x + i) - m) / sum);
}

#if defined(__x86_64__)
using namespace norm_simd;

template <class T>
MB_NORM_AVX2 void softmax_row_avx2(const T* x, T* y, int64_t D) {
  __m256 vmax = _mm256_set1_ps(-kInf);
  __m256 vnan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= D; i += 8) {
    const __m256 v = load8(x + i);
    vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    vmax = _mm256_max_ps(vmax, v);
  }
  bool has_nan = _mm256_movemask_ps(vnan) != 0;
  float m = hmax8(vmax);
  for (; i < D; ++i) {
    const float v = load_f32(x + i);
    if (v != v) has_nan = true;
    else if (v > m) m = v;
  }
  if (has_nan || m == -kInf || m == kInf) return softmax_row_scalar(x, y, D);

  // e = e^(x − m) in f32: in the output for f32 storage (in-place safe: each block is read first).
  float* e;
  if constexpr (std::is_same_v<T, float>) {
    e = y;
  } else {
    static thread_local std::vector<float> scratch;
    if (int64_t(scratch.size()) < D) scratch.resize(size_t(D));
    e = scratch.data();
  }
  const __m256 mv = _mm256_set1_ps(m);
  __m256 s0 = _mm256_setzero_ps(), s1 = s0;
  i = 0;
  for (; i + 16 <= D; i += 16) {
    const __m256 e0 = exp8_nonpositive(_mm256_sub_ps(load8(x + i), mv));
    const __m256 e1 = exp8_nonpositive(_mm256_sub_ps(load8(x + i + 8), mv));
    _mm256_storeu_ps(e + i, e0);
    _mm256_storeu_ps(e + i + 8, e1);
    s0 = _mm256_add_ps(s0, e0);
    s1 = _mm256_add_ps(s1, e1);
  }
  for (; i + 8 <= D; i += 8) {
    const __m256 e0 = exp8_nonpositive(_mm256_sub_ps(load8(x + i), mv));
    _mm256_storeu_ps(e + i, e0);
    s0 = _mm256_add_ps(s0, e0);
  }
  float sum = hsum8(_mm256_add_ps(s0, s1));
  for (; i < D; ++i) {
    e[i] = std::exp(load_f32(x + i) - m);
    sum += e[i];
  }
  // sum ≥ 1 (the max contributes e^0), so 1/sum is finite and normal.
  const float inv = 1.f / sum;
  const __m256 iv = _mm256_set1_ps(inv);
  i = 0;
  for (; i + 8 <= D; i += 8) store8(y + i, _mm256_mul_ps(_mm256_loadu_ps(e + i), iv));
  for (; i < D; ++i) store_f32(y + i, e[i] * inv);
}
#endif

}  // namespace

void softmax_ref(const Tensor& x, Tensor& out) {
  const int64_t D = x.size(-1), rows = x.numel() / D;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.data_as<const T>();
    T* ys = out.data_as<T>();
    for (int64_t r = 0; r < rows; ++r) softmax_row_scalar(xs + r * D, ys + r * D, D);
  });
}

void softmax_fast(const Tensor& x, Tensor& out) {
  const int64_t D = x.size(-1), rows = x.numel() / D;
  [[maybe_unused]] const bool simd = norm_simd::available();
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.data_as<const T>();
    T* ys = out.data_as<T>();
    // exp costs ~10× a multiply-add, hence a smaller grain than the elementwise one.
    parallel_for(rows, std::max<int64_t>(1, (kElementwiseGrain / 4) / D), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
#if defined(__x86_64__)
        if (simd) {
          softmax_row_avx2(xs + r * D, ys + r * D, D);
          continue;
        }
#endif
        softmax_row_scalar(xs + r * D, ys + r * D, D);
      }
    });
  });
}

}  // namespace mb::cpu
