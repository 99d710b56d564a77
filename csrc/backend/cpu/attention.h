// CPU kernels for ops/attention.h. Arguments are validated by the front door.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/tensor.h"
#include "ops/params.h"

namespace mb::cpu {

// Explicit scores, mask, two-pass softmax, weighted sum; one (query, head) row at a time.
void attention_ref(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                   const Tensor* q_block, const Tensor* k_block, Tensor& out, const ops::AttentionParams& p);
// Tiled single-pass online softmax, AVX2+FMA when available, threads over (query block, kv head) and,
// when that leaves threads idle (decode), over chunks of keys merged afterwards (flash-decoding).
void attention_fast(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                    const Tensor* q_block, const Tensor* k_block, Tensor& out, const ops::AttentionParams& p);

// The long-sequence path of attention_fast (attention_gemm.cpp): two GEMMs and a row softmax per head,
// used when there are many queries and no key is masked for any of them (the vision tower).
bool attention_gemm_applies(const Tensor& q, const Tensor& k, const Tensor& k_pos, const Tensor* q_block,
                            const ops::AttentionParams& p);
void attention_gemm(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, const ops::AttentionParams& p);

// ops::local_attention (attention_local.cpp): the reference walks one (query, head) row at a time with
// scalar loops; the fast kernel threads over queries and uses the AVX2 dot / accumulate loops.
void local_attention_ref(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& rel, float softcap, Tensor& out);
void local_attention_fast(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& rel, float softcap,
                          Tensor& out);

// Which inner loops attention_fast uses on this CPU: "avx2" or "portable".
const char* attention_simd_name();

// The mask, shared by both kernels. Positions are widened to 64 bits so q_pos − window cannot overflow.
struct AttentionMask {
  bool causal;
  int64_t window;
  bool block_overrides_window;

  explicit AttentionMask(const ops::AttentionParams& p)
      : causal(p.causal), window(p.window), block_overrides_window(p.block_overrides_window) {}

  // qb / kb: block ids (pass −1 when no blocks were given).
  bool allowed(int64_t qp, int64_t kp, int32_t qb, int32_t kb) const {
    if (kp < 0) return false;  // empty cache slot
    const bool causal_ok = !causal || kp <= qp;
    const bool window_ok = window == 0 || kp > qp - window;
    const bool same_block = qb >= 0 && qb == kb;
    if (block_overrides_window) return (causal_ok && window_ok) || same_block;
    return (causal_ok || same_block) && window_ok;
  }
};

// Raw pointers and strides of the validated inputs (k / v: any outer strides, unit last stride).
struct AttentionView {
  int64_t T, Hq, d, S, Hkv, group;  // group = Hq / Hkv query heads per kv head
  const float* q;                    // [T, Hq, d] contiguous
  const float* k;                    // k[s, h, :] at k + s·ks0 + h·ks1
  const float* v;
  int64_t ks0, ks1, vs0, vs1;
  const int32_t* q_pos;
  const int32_t* k_pos;
  const int32_t* q_block;  // null when no blocks were given
  const int32_t* k_block;
  float* out;              // [T, Hq, d] contiguous

  AttentionView(const Tensor& qt, const Tensor& kt, const Tensor& vt, const Tensor& qp, const Tensor& kp,
                const Tensor* qb, const Tensor* kb, Tensor& o)
      : T(qt.size(0)), Hq(qt.size(1)), d(qt.size(2)), S(kt.size(0)), Hkv(kt.size(1)), group(Hq / Hkv),
        q(qt.data_as<const float>()), k(kt.data_as<const float>()), v(vt.data_as<const float>()),
        ks0(kt.stride(0)), ks1(kt.stride(1)), vs0(vt.stride(0)), vs1(vt.stride(1)),
        q_pos(qp.data_as<const int32_t>()), k_pos(kp.data_as<const int32_t>()),
        q_block(qb ? qb->data_as<const int32_t>() : nullptr), k_block(kb ? kb->data_as<const int32_t>() : nullptr),
        out(o.data_as<float>()) {}

  const float* k_row(int64_t s, int64_t h) const { return k + s * ks0 + h * ks1; }
  const float* v_row(int64_t s, int64_t h) const { return v + s * vs0 + h * vs1; }
  int32_t qb(int64_t t) const { return q_block ? q_block[t] : -1; }
  int32_t kb(int64_t s) const { return k_block ? k_block[s] : -1; }
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// logit = softcap·tanh(scale·dot / softcap), or scale·dot without a cap.
inline float attention_logit(float dot, float scale, float softcap) {
  float s = dot * scale;
  return softcap > 0.f ? softcap * std::tanh(s / softcap) : s;
}

// max that lets NaN win (a NaN logit must poison the row, not be skipped).
inline float nan_max(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

// The prefill path of attention_fast for masked problems (attention_gemm.cpp): per kv head and block of
// queries, two GEMMs over the keys any query of the block may see, the others masked in the logits. False
// (nothing written) where it does not apply: fewer than kMaskedGemmMinQueries queries, more than 32768 key slots
// (the flash kernel is as fast there), or a non-finite value row among the present keys (its 0 weight in a row
// that may not see it would still make NaN).
constexpr int64_t kMaskedGemmMinQueries = 32;
bool attention_masked_gemm(const AttentionView& a, const AttentionMask& mask, const ops::AttentionParams& p);

}  // namespace mb::cpu
