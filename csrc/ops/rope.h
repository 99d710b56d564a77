// Rotary position embeddings (spec §2.4, §3.3): 1-D half-split ("NeoX") rope for the text decoder,
// the frequency tables transformers builds for it, and the vision tower's 2-D axial rope.
// Storage f32, bf16 or f16; output dtype = x dtype. Angles, cos / sin and the rotation are f32.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/exec.h"

namespace mb::ops {

enum class RopeKind {
  Default,       // inv[j] = 1 / θ^(2j/r) for j < r/2, r = int(head_dim · p)   (sliding layers: p = 1)
  Proportional,  // inv[j] = 1 / θ^(2j/head_dim) for j < int(p·head_dim // 2), then 0 up to head_dim/2
};

// The f32 inverse frequencies transformers 5.23.0 computes (rope_utils / Gemma4TextRotaryEmbedding):
// exponent e = f32(2j) / f32(denominator) in f32, θ^e rounded to f32, then 1/that in f32. Our θ^e is
// the correctly rounded f32 value; torch's vectorised powf (SLEEF, ≤ 1 ulp) can differ from it by one
// ulp in a few entries, so tables agree bit-for-bit except for those (see tests/ops/test_rope.py).
// Default returns int(head_dim·p)/2 entries (Gemma 4 ignores p for "default": call it with p = 1);
// Proportional always returns head_dim/2 entries. Throws InputError naming "rope_inv_freq".
std::vector<float> rope_inv_freq(RopeKind kind, int64_t head_dim, double theta,
                                 double partial_rotary_factor = 1.0);
const char* rope_kind_name(RopeKind kind);

// 1-D rope, as HF apply_rotary_pos_emb with cos/sin = [ang, ang], ang = f32(pos) · inv_freq (f32):
//   n = len(inv_freq), d_rot = 2n ≤ d. For i < n: (out[i], out[i+n]) = (x[i]·c − x[i+n]·s,
//   x[i+n]·c + x[i]·s) with c, s = cos, sin(ang[i]); dims ≥ d_rot are copied unchanged.
//   x: [T, H, d] (last dim contiguous, other strides free); positions: [T] i32 / i64 (any values,
//   order, repeats, negatives); inv_freq: [n] f32; out: [T, H, d] contiguous, x's dtype.
// out may be x itself (exact in-place) but may not otherwise overlap an input.
void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& out, const Exec& ex = {});

// Vision 2-D axial rope (Gemma4VisionRotaryEmbedding + apply_multidimensional_rope):
//   half = d/2 (d % 4 == 0), inv[j] = 1/θ^(2j/half) for j < half/2 (rope_inv_freq(Default, half, θ)).
//   dims [0, half) rotate half-split with pos_x = positions[:, 0], dims [half, d) with pos_y = positions[:, 1].
//   x: [N, H, d] (last dim contiguous); positions: [N, 2] i32 / i64 as (x, y); padding (−1, −1) is
//   rotated like any other position. out: [N, H, d] contiguous, x's dtype.
void rope_2d(const Tensor& x, const Tensor& positions, double theta, Tensor& out, const Exec& ex = {});

}  // namespace mb::ops
