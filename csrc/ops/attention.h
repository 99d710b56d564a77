// Scaled dot-product attention over a position-tagged KV set: the op every Gemma 4 text and vision
// layer calls. Keys carry absolute positions (a ring-buffer cache holds them in any order, −1 = empty
// slot), so masks are computed from positions, never from indices.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/exec.h"
#include "ops/params.h"

namespace mb::ops {

// out[t, h, :] = Σ_s softmax_s(logit(t, h, s)) · v[s, h / (Hq/Hkv), :] over the allowed keys s;
// a query row with no allowed key gets zeros. Masked keys are never read (empty slots may hold garbage).
//   q:       [T, Hq, d]  f32, contiguous
//   k, v:    [S, Hkv, d] f32, last dim contiguous, other strides free (e.g. a transposed [Hkv, cap, d] cache)
//   q_pos:   [T] i32 absolute query positions
//   k_pos:   [S] i32 absolute key positions, −1 = empty slot
//   q_block: [T] i32 or null, bidirectional block id per query (−1 = none); k_block: [S], given together
//   out:     [T, Hq, d] f32, contiguous, not overlapping any input
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
               const Tensor* q_block, const Tensor* k_block, Tensor& out, const AttentionParams& p,
               const Exec& ex = {});

// Causal local attention with a relative-position key term (the Gemma 4 audio conformer, spec §4.4): for
// query t, head h and the W = rel.size(0) keys j with max(0, t − W + 1) <= j <= t (self included),
//   logit(t, h, j) = softcap·tanh((q[t,h]·k[j,h] + q[t,h]·rel[t−j, h]) / softcap)   (softcap 0: no cap)
// (the two dot products summed after each is complete, as transformers adds its two matrices), softmax in
// f32, out[t, h] = Σ_j softmax_j · v[j, h]. Keys before t = 0 do not exist. No scale: q and k come
// pre-scaled.
//   q, k, v: [T, H, d] f32 contiguous; rel: [W, H, d] f32 contiguous (rel[δ]: distance δ, W >= 1)
//   out:     [T, H, d] f32, contiguous, not overlapping any input
void local_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& rel, float softcap, Tensor& out,
                     const Exec& ex = {});

}  // namespace mb::ops
