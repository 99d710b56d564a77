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

}  // namespace mb::ops
