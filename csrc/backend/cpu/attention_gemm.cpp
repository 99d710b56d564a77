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

using ops::AttentionParams;

namespace {

constexpr int64_t kMinQueries = 32;            // below this the flash kernel is as fast
constexpr int64_t kLogitBytes = int64_t(32) << 20;  // logits of one query block: at most 32 MB

// Softmax of one row in place (logits already scaled / capped): e^(x − max) / Σ. A NaN logit poisons the row.
void softmax_row_portable(float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 0; i < n; ++i) m = nan_max(m, x[i]);
  if (m != m || std::isinf(m)) {  // as the reference: e^(±inf − ±inf) is NaN
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
  if (nan || std::isinf(m)) {  // as the reference: e^(±inf − ±inf) is NaN
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

// ---------------------------------------------------------------------------------------------------------
// The masked path (causal / sliding-window / block-masked prefill). Work item: kv head kvh × queries [t0, t1)
// (its rows r = (t − t0)·G + g, every query head g of the group). The keys any of its queries may see are
// collected in slot order; logits [rows, n] = Q·Kᵀ over them, the entries a row may not see set to −inf,
// the exact softmax of each row (max over its allowed keys, as the reference), out = P·V. A row's masked
// keys enter P·V with weight exactly 0, which is why every present value row must be finite.

namespace {

constexpr int64_t kMaskedRows = 192;               // rows per item: 16 tiles of the 12-row micro-kernel
constexpr int64_t kMaskedLogits = int64_t(1) << 20;  // logits of one item: at most 4 MB
constexpr int64_t kMinMaskedRows = 32;              // fewer rows per item: the flash kernel is faster

// Per-thread scratch, grown on first use and reused.
struct MaskedScratch {
  std::vector<int32_t> keys;  // [n] slots any query of the item may see
  std::vector<char> allowed;  // [queries, S] whether query t may see key j (columns j < n used)
  std::vector<float> q, k, v;  // gathered rows (only when not readable in place)
  std::vector<float> logits;  // [rows, n] logits, then weights
  std::vector<float> out;     // [rows, d] (only when the item's output rows are not contiguous)
};

template <class T>
T* grown(std::vector<T>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

// True when every value row of every present slot (k_pos >= 0) is finite (exponent bits not all ones).
bool present_values_finite(const AttentionView& a) {
  uint32_t bad = 0;
  for (int64_t s = 0; s < a.S; ++s) {
    if (a.k_pos[s] < 0) continue;
    for (int64_t h = 0; h < a.Hkv; ++h) {
      const uint32_t* bits = reinterpret_cast<const uint32_t*>(a.v_row(s, h));
      for (int64_t i = 0; i < a.d; ++i) bad |= uint32_t((bits[i] & 0x7f800000u) == 0x7f800000u);
    }
  }
  return bad == 0;
}

void run_masked_item(const AttentionView& a, const AttentionMask& mask, const AttentionParams& p, int64_t t0,
                     int64_t t1, int64_t kvh, MaskedScratch& sc) {
  const int64_t G = a.group, d = a.d, nq = t1 - t0, rows = nq * G;
  // The keys of the item and which query sees which, in one pass over the slots.
  sc.keys.clear();
  // Without blocks a key can be seen only inside (min q_pos − window, max q_pos]: the slots outside (empty, in
  // the future of every query, behind every window) are passed over without asking each query.
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  if (!a.q_block) {
    const auto [qmin, qmax] = std::minmax_element(a.q_pos + t0, a.q_pos + t1);
    if (mask.causal) hi = *qmax;
    if (mask.window) lo = int64_t(*qmin) - mask.window;
  }
  // allowed[(t − t0)·S + j]: whether query t sees key j (row stride S: a key's column is written as it is met).
  char* allowed = grown(sc.allowed, nq * a.S);
  for (int64_t s = 0; s < a.S; ++s) {
    if (a.k_pos[s] < 0 || a.k_pos[s] <= lo || a.k_pos[s] > hi) continue;
    const int64_t j = int64_t(sc.keys.size());
    bool any = false;
    for (int64_t t = t0; t < t1; ++t) {
      const bool seen = mask.allowed(a.q_pos[t], a.k_pos[s], a.qb(t), a.kb(s));
      allowed[(t - t0) * a.S + j] = seen;
      any = any || seen;
    }
    if (any) sc.keys.push_back(int32_t(s));  // (else the next key's column overwrites this one)
  }
  const int64_t n = int64_t(sc.keys.size());
  const bool contiguous_out = a.Hkv == 1;  // rows (t, g) of one kv head follow each other in q and out
  float* o = contiguous_out ? a.out + t0 * a.Hq * d : grown(sc.out, rows * d);
  if (n == 0) {  // no query of the block sees any key: zeros
    std::fill(o, o + rows * d, 0.f);
  } else {
    // K and V rows of the keys: in place when they are consecutive slots, else gathered.
    GemmB kb{a.k_row(sc.keys[0], kvh), DType::F32, a.ks0, 1}, vb{a.v_row(sc.keys[0], kvh), DType::F32, 1, a.vs0};
    if (sc.keys.back() - sc.keys.front() != n - 1) {
      float* kg = grown(sc.k, n * d);
      float* vg = grown(sc.v, n * d);
      for (int64_t j = 0; j < n; ++j) {
        std::copy(a.k_row(sc.keys[j], kvh), a.k_row(sc.keys[j], kvh) + d, kg + j * d);
        std::copy(a.v_row(sc.keys[j], kvh), a.v_row(sc.keys[j], kvh) + d, vg + j * d);
      }
      kb = GemmB{kg, DType::F32, d, 1};
      vb = GemmB{vg, DType::F32, 1, d};
    }
    const float* q = a.q + (t0 * a.Hq + kvh * G) * d;
    if (!contiguous_out) {
      float* qg = grown(sc.q, rows * d);
      for (int64_t t = t0; t < t1; ++t)
        std::copy(a.q + (t * a.Hq + kvh * G) * d, a.q + (t * a.Hq + kvh * G + G) * d, qg + (t - t0) * G * d);
      q = qg;
    }
    // logits[r, j] = q_r · k_j
    float* logits = grown(sc.logits, rows * n);
    gemm(rows, n, d, q, d, kb, nullptr, logits, n, /*parallel=*/false);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = logits + r * n;
      const char* seen = allowed + (r / G) * a.S;
      bool any = false;
      for (int64_t j = 0; j < n; ++j) {
        any = any || seen[j];
        row[j] = seen[j] ? row[j] : kNegInf;
      }
      if (!any) {  // this query sees no key: zero weights, a zero row
        std::fill(row, row + n, 0.f);
        continue;
      }
      if (p.scale != 1.f || p.softcap > 0.f)
        for (int64_t j = 0; j < n; ++j)
          if (seen[j]) row[j] = attention_logit(row[j], p.scale, p.softcap);
      softmax_row(row, n);  // masked entries: e^(−inf) = 0
    }
    // out[r] = Σ_j P[r, j] · v_j
    gemm(rows, d, n, logits, n, vb, nullptr, o, d, /*parallel=*/false);
  }
  if (!contiguous_out)
    for (int64_t t = t0; t < t1; ++t)
      std::copy(o + (t - t0) * G * d, o + (t - t0 + 1) * G * d, a.out + (t * a.Hq + kvh * G) * d);
}

}  // namespace

bool attention_masked_gemm(const AttentionView& a, const AttentionMask& mask, const AttentionParams& p) {
  // Past ~32K key slots an item's logits leave room for too few rows, and packing each item's keys outweighs
  // its products (d = 512, 8 query heads: 6.5 vs 7.8 ms per query at 32768 slots, 21.5 vs 15.5 at 65536).
  if (a.T < kMaskedGemmMinQueries || a.S == 0 || kMaskedLogits / a.S < kMinMaskedRows) return false;
  if (!present_values_finite(a)) return false;
  // Queries per item: kMaskedRows rows, fewer when the keys are many (the logits stay within kMaskedLogits).
  const int64_t rows = std::clamp<int64_t>(std::min(kMaskedRows, kMaskedLogits / a.S), a.group, kMaskedRows);
  const int64_t bq = std::max<int64_t>(1, rows / a.group), blocks = (a.T + bq - 1) / bq;
  parallel_for(a.Hkv * blocks, 1, [&](int64_t i0, int64_t i1) {
    thread_local MaskedScratch scratch;
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t kvh = item % a.Hkv, t0 = (item / a.Hkv) * bq;
      run_masked_item(a, mask, p, t0, std::min(a.T, t0 + bq), kvh, scratch);
    }
  });
  return true;
}

}  // namespace mb::cpu
