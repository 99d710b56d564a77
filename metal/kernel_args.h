// Argument structs passed to kernels as `constant XArgs& args [[buffer(n)]]`, shared by the .metal
// kernels (both worlds) and the C++ dispatch code (csrc/backend/metal/*_dispatch.cpp).
// Layout rule: 4-byte scalars only (mb_u32 / mb_i32 / float), no vectors, no pointers, so MSL and C++
// agree on every offset; each struct's size is checked on the C++ side.
#pragma once

#ifdef __METAL_VERSION__
typedef uint mb_u32;
typedef int mb_i32;
#else
#include <cstdint>
typedef uint32_t mb_u32;
typedef int32_t mb_i32;
#endif

// ---- elementwise.metal ----
// Unary kinds: y[i] = f(x[i]) for i < n. a / b: softcap cap, clamp lo / hi, scale factor.
struct UnaryArgs {
  mb_u32 n;
  float a;
  float b;
};

// Binary: y[i] = a[i] (+|*) b[i % nb] for i < n (nb == n: same shape; nb < n: b repeats, a row or one element).
struct BinaryArgs {
  mb_u32 n;
  mb_u32 nb;
};

// ---- norm.metal ----
// rms_norm / layer_norm: one threadgroup per row of x [rows, cols]. has_weight / has_bias are 0 or 1
// (an absent parameter is bound as an empty buffer and never read).
struct NormArgs {
  mb_u32 rows;
  mb_u32 cols;
  float eps;
  mb_u32 has_weight;
  mb_u32 has_bias;
};

// ---- softmax.metal ----
// softmax over the last dimension: one threadgroup per row of x [rows, cols].
struct SoftmaxArgs {
  mb_u32 rows;
  mb_u32 cols;
};

// ---- rope.metal ----
// rope / rope_2d: x [tokens, heads, head_dim] strided (element (t, h, i) at x_offset + t·x_stride_t +
// h·x_stride_h + i of the bound span), y contiguous. pairs: n = len(inv_freq) (rope) or q = head_dim/4
// (rope_2d); items: threads needed per token, spread over groups_per_token threadgroups. Position
// (t, k) at pos_offset + t·pos_stride_t + k·pos_stride_k. copy_tail: rope copies dims [2n, head_dim).
struct RopeArgs {
  mb_u32 tokens;
  mb_u32 heads;
  mb_u32 head_dim;
  mb_u32 pairs;
  mb_u32 items;
  mb_u32 groups_per_token;
  mb_i32 x_offset;
  mb_i32 x_stride_t;
  mb_i32 x_stride_h;
  mb_i32 pos_offset;
  mb_i32 pos_stride_t;
  mb_i32 pos_stride_k;
  mb_u32 copy_tail;

// ---- linear.metal ----
// out[m, n] = Σ_k x[m, k]·w[n, k] (+ bias[n] when has_bias != 0); x: [M, K], w: [N, K], out: [M, N].
struct LinearArgs {
  mb_u32 M;
  mb_u32 K;
  mb_u32 N;
  mb_u32 has_bias;
};

// ---- embedding.metal ----
// out[t, d] = f32(table[ids[t], d]) * scale for t < T, d < D.
struct EmbeddingArgs {
  mb_u32 T;
  mb_u32 D;
  float scale;
};

// ---- topk.metal ----
// Per row r < R of x [R, N]: the k first elements in topk order -> values / indices [R, k].
struct TopkArgs {
  mb_u32 R;
  mb_u32 N;
  mb_u32 k;
};
