// Attention as two GEMMs and a row softmax, for long unmasked problems (the vision tower: every patch
// attends to every patch). Per query head and block of queries: logits = Q·Kᵀ (backend/cpu/gemm.h),
// scale / softcap, softmax per row (f32, vectorised exp), out = P·V (GEMM again, straight into out's rows).
// Only used when no key is masked for any query: a masked key's row never enters the products, as the
// op's contract requires (an empty cache slot may hold garbage), because there are none.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/norm_simd.h"
#include "core/thread_pool.h"

namespace mb::cpu {

namespace {

constexpr int64_t kMinQueries = 32;            // below this the flash kernel is as fast
constexpr int64_t kLogitBytes = int64_t(32) << 20;  // logits of one query block: at most 32 MB

// Softmax of one row in place (logits already scaled / capped): e^(x − max) / Σ. A NaN logit poisons the row.
void softmax_row_portable(float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 0; i < n; ++i) m = nan_max(m, x[i]);
  if (m != m) {
    std::fill(x, x + n, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) sum += x[i] = std::exp(x[i] - m);
  for (int64_t i = 0; i < n; ++i) x[i] *= 1.f / sum;
}

#if defined(__x86_64__)
MB_NORM_AVX2 void softmax_row_avx2(float* x, int64_t n) {
  using namespace norm_simd;
  int64_t i = 0;
  __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity()), vnan = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    vmax = _mm256_max_ps(vmax, v);
  }
  float m = hmax8(vmax);
  bool nan = _mm256_movemask_ps(vnan) != 0;
  for (; i < n; ++i) {
    nan = nan || x[i] != x[i];
    m = std::max(m, x[i]);
  }
  if (nan) {
    std::fill(x, x + n, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  const __m256 mv = _mm256_set1_ps(m);
  __m256 s0 = _mm256_setzero_ps();
  float sum = 0.f;
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 e = exp8_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    _mm256_storeu_ps(x + i, e);
    s0 = _mm256_add_ps(s0, e);
  }
  for (; i < n; ++i) sum += x[i] = std::exp(x[i] - m);
  sum += hsum8(s0);
  const __m256 inv = _mm256_set1_ps(1.f / sum);
  for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  for (; i < n; ++i) x[i] *= 1.f / sum;
}
#endif

void softmax_row(float* x, int64_t n) {
#if defined(__x86_64__)
  if (norm_simd::available()) return softmax_row_avx2(x, n);
#endif
  softmax_row_portable(x, n);
}

}  // namespace

bool attention_gemm_applies(const Tensor& q, const Tensor& k, const Tensor& k_pos, const Tensor* q_block,
                            const ops::AttentionParams& p) {
  if (q.size(0) < kMinQueries || k.size(0) < 1 || p.causal || p.window != 0 || q_block) return false;
  const int32_t* kp = k_pos.data_as<const int32_t>();
  for (int64_t s = 0; s < k.size(0); ++s)
    if (kp[s] < 0) return false;  // an empty slot: the flash kernel never reads it
  return true;
}

void attention_gemm(const Tensor& qt, const Tensor& kt, const Tensor& vt, Tensor& ot, const ops::AttentionParams& p) {
  const int64_t T = qt.size(0), Hq = qt.size(1), d = qt.size(2), S = kt.size(0), Hkv = kt.size(1), G = Hq / Hkv;
  const float* q = qt.data_as<const float>();
  const float* k = kt.data_as<const float>();
  const float* v = vt.data_as<const float>();
  float* out = ot.data_as<float>();
  // Every kv head's K (B = keys × dims) and V (B = dims × keys) packed once for all its query blocks.
  const int64_t k_size = packed_b_size(S, d), v_size = packed_b_size(d, S);
  thread_local std::vector<float> pack_store;
  if (pack_store.size() < size_t(Hkv * (k_size + v_size))) pack_store.resize(size_t(Hkv * (k_size + v_size)));
  float* const packs = pack_store.data();
  parallel_for(2 * Hkv, 1, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t kvh = j / 2;
      if (j % 2 == 0) pack_gemm_b(GemmB{k + kvh * kt.stride(1), DType::F32, kt.stride(0), 1}, S, d, packs + kvh * (k_size + v_size));
      else pack_gemm_b(GemmB{v + kvh * vt.stride(1), DType::F32, 1, vt.stride(0)}, d, S, packs + kvh * (k_size + v_size) + k_size);
    }
  });
  // Work items: (head, block of bq queries), each on one thread with its logits [bq, S] kept in that
  // core's cache (54 × 2304 floats = 0.5 MB at the vision tower's default size).
  const int64_t bq = std::clamp<int64_t>(kLogitBytes / 64 / (4 * S) / 12 * 12, 12, 96);  // whole tiles of 6 or 12 rows
  const int64_t blocks = (T + bq - 1) / bq;
  parallel_for(Hq * blocks, 1, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> logit_store;
    if (logit_store.size() < size_t(bq * S)) logit_store.resize(size_t(bq * S));
    float* const logits = logit_store.data();
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t h = item / blocks, t0 = (item % blocks) * bq, n = std::min(bq, T - t0), kvh = h / G;
      const float* kp = packs + kvh * (k_size + v_size);
      // logits[t, s] = q[t0 + t, h] · k[s, kvh]
      gemm_prepacked(n, S, d, q + (t0 * Hq + h) * d, Hq * d, kp, nullptr, logits, S, /*parallel=*/false);
      for (int64_t r = 0; r < n; ++r) {
        float* row = logits + r * S;
        if (p.scale != 1.f || p.softcap > 0.f)
          for (int64_t s = 0; s < S; ++s) row[s] = attention_logit(row[s], p.scale, p.softcap);
        softmax_row(row, S);
      }
      // out[t0 + t, h] = Σ_s P[t, s] · v[s, kvh]
      gemm_prepacked(n, d, S, logits, S, kp + k_size, nullptr, out + (t0 * Hq + h) * d, Hq * d, /*parallel=*/false);
    }
  });
}

}  // namespace mb::cpu
