// CPU kernels for ops::local_attention (the audio conformer's chunked local attention with a relative-
// position key term). The window is small (W = 12 keys), so a (query, head) row is a dozen dot products:
// both kernels keep the W logits of one row in registers / a small array and never materialise more.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/attention_simd.h"
#include "core/thread_pool.h"

namespace mb::cpu {

namespace {

// The operands as raw rows: row (t, h) of q / k / v / out at (t·H + h)·d, distance δ of rel at (δ·H + h)·d.
struct LocalArgs {
  int64_t T, H, d, W;
  const float *Q, *K, *V, *R;
  float* O;
  LocalArgs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& rel, Tensor& out)
      : T(q.size(0)), H(q.size(1)), d(q.size(2)), W(rel.size(0)), Q(q.data_as<const float>()),
        K(k.data_as<const float>()), V(v.data_as<const float>()), R(rel.data_as<const float>()), O(out.data_as<float>()) {}
  int64_t row(int64_t t, int64_t h) const { return (t * H + h) * d; }
};

// logit = softcap·tanh(x / softcap), or x without a cap (x = q·k + q·rel).
inline float capped(float x, float softcap) { return softcap > 0.f ? softcap * std::tanh(x / softcap) : x; }

// Softmax of n logits in place (f32, max-subtracted; NaN poisons the row), returning nothing: w[j] sums to 1.
inline void softmax_row(float* w, int n) {
  float m = w[0];
  for (int j = 1; j < n; ++j) m = nan_max(m, w[j]);
  float sum = 0.f;
  for (int j = 0; j < n; ++j) {
    w[j] = std::exp(w[j] - m);
    sum += w[j];
  }
  const float inv = 1.f / sum;
  for (int j = 0; j < n; ++j) w[j] *= inv;
}

}  // namespace

void local_attention_ref(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& rel, float softcap,
                         Tensor& out) {
  const LocalArgs s(q, k, v, rel, out);
  std::vector<float> w(size_t(s.W));
  for (int64_t t = 0; t < s.T; ++t)
    for (int64_t h = 0; h < s.H; ++h) {
      const float* qr = s.Q + s.row(t, h);
      const int64_t first = std::max<int64_t>(0, t - s.W + 1);
      const int n = int(t - first + 1);
      for (int i = 0; i < n; ++i) {
        const int64_t j = first + i;
        const float* kr = s.K + s.row(j, h);
        const float* rr = s.R + s.row(t - j, h);
        float ac = 0.f, bd = 0.f;
        for (int64_t e = 0; e < s.d; ++e) ac += qr[e] * kr[e];
        for (int64_t e = 0; e < s.d; ++e) bd += qr[e] * rr[e];
        w[size_t(i)] = capped(ac + bd, softcap);
      }
      softmax_row(w.data(), n);
      float* o = s.O + s.row(t, h);
      for (int64_t e = 0; e < s.d; ++e) {
        float acc = 0.f;
        for (int i = 0; i < n; ++i) acc += w[size_t(i)] * s.V[s.row(first + i, h) + e];
        o[e] = acc;
      }
    }
}

void local_attention_fast(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& rel, float softcap,
                          Tensor& out) {
  const LocalArgs s(q, k, v, rel, out);
  const attn_simd::Kernels& simd = attn_simd::kernels();
  // Rows of ~W·d·3 multiply-adds each: a grain of 16 queries keeps a thread busy for a few µs.
  parallel_for(s.T, 16, [&](int64_t t0, int64_t t1) {
    std::vector<const float*> k_rows(size_t(s.W)), r_rows(size_t(s.W)), v_rows(size_t(s.W));
    std::vector<float> ac(size_t(s.W)), bd(size_t(s.W));
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t h = 0; h < s.H; ++h) {
        const int64_t first = std::max<int64_t>(0, t - s.W + 1);
        const int n = int(t - first + 1);
        for (int i = 0; i < n; ++i) {
          const int64_t j = first + i;
          k_rows[size_t(i)] = s.K + s.row(j, h);
          v_rows[size_t(i)] = s.V + s.row(j, h);
          r_rows[size_t(i)] = s.R + s.row(t - j, h);
        }
        const float* qr = s.Q + s.row(t, h);
        simd.dot_heads(ac.data(), 0, qr, 1, k_rows.data(), n, s.d);
        simd.dot_heads(bd.data(), 0, qr, 1, r_rows.data(), n, s.d);
        for (int i = 0; i < n; ++i) ac[size_t(i)] = capped(ac[size_t(i)] + bd[size_t(i)], softcap);
        softmax_row(ac.data(), n);
        float* o = s.O + s.row(t, h);
        std::fill(o, o + s.d, 0.f);
        simd.accumulate_heads(o, ac.data(), 0, 1, v_rows.data(), n, s.d);
      }
  });
}

}  // namespace mb::cpu
