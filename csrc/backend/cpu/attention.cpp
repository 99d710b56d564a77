// Attention kernels. Reference: per (query, head) row, explicit logits over all keys, masked, two-pass
// softmax, weighted sum of value rows. Fast: flash-attention style tiles with a single-pass online
// softmax; threads over (query block, kv head) work items and, for decode-sized inputs, also over
// chunks of the key axis whose partial (max, sum, output) are merged at the end (flash-decoding).
#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/attention_simd.h"
#include "core/thread_pool.h"

namespace mb::cpu {

using ops::AttentionParams;

void attention_ref(const Tensor& qt, const Tensor& kt, const Tensor& vt, const Tensor& qpt, const Tensor& kpt,
                   const Tensor* qbt, const Tensor* kbt, Tensor& ot, const AttentionParams& p) {
  const AttentionView a(qt, kt, vt, qpt, kpt, qbt, kbt, ot);
  const AttentionMask mask(p);
  std::vector<float> logit(size_t(a.S));
  std::vector<char> allowed(size_t(a.S));
  for (int64_t t = 0; t < a.T; ++t) {
    for (int64_t h = 0; h < a.Hq; ++h) {
      const int64_t kvh = h / a.group;
      const float* qr = a.q + (t * a.Hq + h) * a.d;
      float* o = a.out + (t * a.Hq + h) * a.d;
      // Pass 1: logits of the allowed keys and their max (masked keys are never read).
      bool any = false;
      float mx = kNegInf;
      for (int64_t s = 0; s < a.S; ++s) {
        allowed[s] = mask.allowed(a.q_pos[t], a.k_pos[s], a.qb(t), a.kb(s));
        if (!allowed[s]) continue;
        const float* kr = a.k_row(s, kvh);
        float dot = 0.f;
        for (int64_t i = 0; i < a.d; ++i) dot += qr[i] * kr[i];
        logit[s] = attention_logit(dot, p.scale, p.softcap);
        mx = any ? nan_max(mx, logit[s]) : logit[s];
        any = true;
      }
      for (int64_t i = 0; i < a.d; ++i) o[i] = 0.f;
      if (!any) continue;  // no allowed key: zeros
      // Pass 2: exp(logit − max) and their sum; then the normalised weighted sum of value rows.
      float sum = 0.f;
      for (int64_t s = 0; s < a.S; ++s) {
        if (!allowed[s]) continue;
        logit[s] = std::exp(logit[s] - mx);
        sum += logit[s];
      }
      for (int64_t s = 0; s < a.S; ++s) {
        if (!allowed[s]) continue;
        const float w = logit[s] / sum;
        const float* vr = a.v_row(s, kvh);
        for (int64_t i = 0; i < a.d; ++i) o[i] += w * vr[i];
      }
    }
  }
}

namespace {

// Below this many keys per chunk, splitting the key axis costs more (merge) than it gains.
constexpr int64_t kMinKeysPerSplit = 128;

// Per-thread scratch of one work item, grown on first use and reused (no allocation per item).
struct FastScratch {
  std::vector<float> acc;    // [rows, d] unnormalised output
  std::vector<float> mx;     // [rows] running max of the logits
  std::vector<float> sum;    // [rows] running Σ exp(logit − mx)
  std::vector<char> seen;    // [tq] any allowed key so far (per query; shared by its heads)
  std::vector<float> logit;  // [group, tile] logits, then softmax weights
  std::vector<const float*> k_rows, v_rows;  // [tile] gathered allowed keys of one query

  void reserve(int64_t rows, int64_t tq, int64_t group, int64_t d, int64_t tile) {
    if (int64_t(acc.size()) < rows * d) acc.resize(size_t(rows * d));
    if (int64_t(mx.size()) < rows) mx.resize(size_t(rows)), sum.resize(size_t(rows));
    if (int64_t(seen.size()) < tq) seen.resize(size_t(tq));
    if (int64_t(logit.size()) < group * tile) logit.resize(size_t(group * tile));
    if (int64_t(k_rows.size()) < tile) k_rows.resize(size_t(tile)), v_rows.resize(size_t(tile));
  }
};

// How the fast kernel cuts the problem into work items.
struct FastPlan {
  int64_t tile;    // keys per tile (the K / V rows of one tile stay in cache across the item's rows)
  int64_t tq;      // queries per item; an item handles tq·group rows of one kv head
  int64_t nqb;     // query blocks
  int64_t nsplit;  // chunks of the key axis (1 = no flash-decoding merge)
  int64_t chunk;   // keys per chunk

  FastPlan(const AttentionView& a, int num_threads) {
    tile = std::clamp<int64_t>(8192 / a.d, 16, 128);
    // ≤ 32 rows and ≤ 64 KiB of accumulators per item.
    tq = std::clamp<int64_t>(std::min<int64_t>(32 / a.group, 16384 / (a.group * a.d)), 1, std::max<int64_t>(a.T, 1));
    nqb = (a.T + tq - 1) / tq;
    const int64_t items = nqb * a.Hkv;
    nsplit = 1;
    if (items < 2 * int64_t(num_threads)) {
      // Split by the keys present, not the slots: a decode step early in a ring cache has mostly empty
      // slots, and splitting them only adds a merge and two pool dispatches.
      int64_t present = 0;
      for (int64_t s = 0; s < a.S; ++s) present += a.k_pos[s] >= 0;
      const int64_t want = (2 * int64_t(num_threads) + items - 1) / items;
      nsplit = std::clamp<int64_t>(std::min(want, present / kMinKeysPerSplit), 1, a.S > 0 ? a.S : 1);
    }
    chunk = (a.S + nsplit - 1) / nsplit;
    if (chunk > 0) nsplit = (a.S + chunk - 1) / chunk;
  }
};

// Partial result of one row over one key chunk: [seen, mx, sum, acc[d]].
constexpr int64_t kPartialHeader = 3;

// One work item: queries [t0, t1) × the `group` query heads of kv head kvh × keys [s0, s1).
// Writes the normalised rows to out (nsplit == 1) or the row partials to `partial`.
void run_item(const AttentionView& a, const AttentionParams& p, const AttentionMask& mask, const FastPlan& plan,
              int64_t t0, int64_t t1, int64_t kvh, int64_t split, float* partial, FastScratch& sc) {
  const auto& simd = attn_simd::kernels();
  const int64_t d = a.d, G = a.group, tq = t1 - t0, rows = tq * G;
  const int64_t s0 = split * plan.chunk, s1 = std::min(a.S, s0 + plan.chunk);
  sc.reserve(rows, tq, G, d, plan.tile);
  std::fill(sc.acc.begin(), sc.acc.begin() + rows * d, 0.f);
  std::fill(sc.mx.begin(), sc.mx.begin() + rows, kNegInf);
  std::fill(sc.sum.begin(), sc.sum.begin() + rows, 0.f);
  std::fill(sc.seen.begin(), sc.seen.begin() + tq, 0);

  for (int64_t ts = s0; ts < s1; ts += plan.tile) {
    const int64_t te = std::min(s1, ts + plan.tile);
    for (int64_t t = t0; t < t1; ++t) {
      // Gather this query's allowed keys of the tile (the mask does not depend on the head).
      int n = 0;
      const int64_t qp = a.q_pos[t];
      const int32_t qb = a.qb(t);
      for (int64_t s = ts; s < te; ++s) {
        if (!mask.allowed(qp, a.k_pos[s], qb, a.kb(s))) continue;
        sc.k_rows[n] = a.k_row(s, kvh);
        sc.v_rows[n] = a.v_row(s, kvh);
        ++n;
      }
      if (n == 0) continue;
      const bool first = !sc.seen[t - t0];
      sc.seen[t - t0] = 1;
      // Logits of all heads of the group at once (each key row loaded once): logit[g·ld + j].
      const int64_t ld = plan.tile;
      float* logit = sc.logit.data();
      float* acc_t = sc.acc.data() + (t - t0) * G * d;
      simd.dot_heads(logit, ld, a.q + (t * a.Hq + kvh * G) * d, int(G), sc.k_rows.data(), n, d);
      for (int64_t g = 0; g < G; ++g) {
        const int64_t r = (t - t0) * G + g;
        float* lg = logit + g * ld;
        float tile_max = kNegInf;
        for (int j = 0; j < n; ++j) {
          lg[j] = attention_logit(lg[j], p.scale, p.softcap);
          tile_max = j == 0 ? lg[j] : nan_max(tile_max, lg[j]);
        }
        // Online softmax: rescale what was accumulated under the old max when the max grows.
        const float new_max = first ? tile_max : nan_max(sc.mx[r], tile_max);
        if (!first && !(new_max == sc.mx[r])) {
          const float alpha = std::exp(sc.mx[r] - new_max);
          sc.sum[r] *= alpha;
          float* acc = acc_t + g * d;
          for (int64_t i = 0; i < d; ++i) acc[i] *= alpha;
        }
        float tile_sum = 0.f;
        for (int j = 0; j < n; ++j) {
          lg[j] = std::exp(lg[j] - new_max);
          tile_sum += lg[j];
        }
        sc.sum[r] += tile_sum;
        sc.mx[r] = new_max;
      }
      // acc[g] += Σ_j weight[g, j]·v_j for every head of the group (each value row loaded once).
      simd.accumulate_heads(acc_t, logit, ld, int(G), sc.v_rows.data(), n, d);
    }
  }

  for (int64_t t = t0; t < t1; ++t) {
    const bool seen = sc.seen[t - t0];
    for (int64_t g = 0; g < G; ++g) {
      const int64_t h = kvh * G + g, r = (t - t0) * G + g;
      const float* acc = sc.acc.data() + r * d;
      if (plan.nsplit == 1) {
        float* o = a.out + (t * a.Hq + h) * d;
        if (!seen) std::fill(o, o + d, 0.f);  // no allowed key: zeros
        else for (int64_t i = 0; i < d; ++i) o[i] = acc[i] / sc.sum[r];
      } else {
        float* part = partial + ((t * a.Hq + h) * plan.nsplit + split) * (d + kPartialHeader);
        part[0] = seen ? 1.f : 0.f;
        part[1] = sc.mx[r];
        part[2] = sc.sum[r];
        std::copy(acc, acc + d, part + kPartialHeader);
      }
    }
  }
}

// Flash-decoding merge of one row: out = Σ_c e^(mx_c − M)·acc_c / Σ_c e^(mx_c − M)·sum_c, M = max_c mx_c.
void merge_row(const float* parts, int64_t nsplit, int64_t d, float* o) {
  const int64_t stride = d + kPartialHeader;
  bool any = false;
  float M = kNegInf;
  for (int64_t c = 0; c < nsplit; ++c) {
    const float* part = parts + c * stride;
    if (part[0] == 0.f) continue;
    M = any ? nan_max(M, part[1]) : part[1];
    any = true;
  }
  std::fill(o, o + d, 0.f);
  if (!any) return;  // no allowed key in any chunk: zeros
  float total = 0.f;
  for (int64_t c = 0; c < nsplit; ++c) {
    const float* part = parts + c * stride;
    if (part[0] == 0.f) continue;
    const float w = std::exp(part[1] - M);
    total += w * part[2];
    const float* acc = part + kPartialHeader;
    for (int64_t i = 0; i < d; ++i) o[i] += w * acc[i];
  }
  for (int64_t i = 0; i < d; ++i) o[i] /= total;
}

}  // namespace

const char* attention_simd_name() { return attn_simd::kernels().name; }

void attention_fast(const Tensor& qt, const Tensor& kt, const Tensor& vt, const Tensor& qpt, const Tensor& kpt,
                    const Tensor* qbt, const Tensor* kbt, Tensor& ot, const AttentionParams& p) {
  if (attention_gemm_applies(qt, kt, kpt, qbt, p)) return attention_gemm(qt, kt, vt, ot, p);
  const AttentionView a(qt, kt, vt, qpt, kpt, qbt, kbt, ot);
  if (a.T == 0) return;
  const AttentionMask mask(p);
  if (attention_masked_gemm(a, mask, p)) return;  // a prefill chunk: GEMMs over the keys each block sees
  const FastPlan plan(a, ThreadPool::global().num_threads());

  // Split partials live in the calling thread's buffer, reused across calls (decode allocates once).
  thread_local std::vector<float> partials;
  float* partial = nullptr;
  if (plan.nsplit > 1) {
    const size_t need = size_t(a.T * a.Hq * plan.nsplit * (a.d + kPartialHeader));
    if (partials.size() < need) partials.resize(need);
    partial = partials.data();
  }

  const int64_t items = plan.nqb * a.Hkv * plan.nsplit;
  parallel_for(items, 1, [&](int64_t b, int64_t e) {
    thread_local FastScratch scratch;
    for (int64_t it = b; it < e; ++it) {
      const int64_t split = it % plan.nsplit, rest = it / plan.nsplit;
      const int64_t kvh = rest % a.Hkv, qblock = rest / a.Hkv;
      const int64_t t0 = qblock * plan.tq, t1 = std::min(a.T, t0 + plan.tq);
      run_item(a, p, mask, plan, t0, t1, kvh, split, partial, scratch);
    }
  });

  if (plan.nsplit > 1) {
    const int64_t rows = a.T * a.Hq, stride = plan.nsplit * (a.d + kPartialHeader);
    parallel_for(rows, std::max<int64_t>(1, 4096 / stride), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) merge_row(partial + r * stride, plan.nsplit, a.d, a.out + r * a.d);
    });
  }
}

}  // namespace mb::cpu
