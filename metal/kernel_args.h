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
};

// ---- linear.metal ----
// out[m, n] = Σ_k x[m, k]·w[n, k] (+ bias[n] when has_bias != 0); x: [M, K], w: [N, K], out: [M, N].
struct LinearArgs {
  mb_u32 M;
  mb_u32 K;
  mb_u32 N;
  mb_u32 has_bias;
};

// ---- quant.metal ----
// linear_quantized: x [M, K] f32, q [N, row_bytes] u8, scales / biases [N, groups], bias [N], out [M, N] f32.
struct QuantLinearArgs {
  mb_u32 M, K, N;
  mb_u32 has_bias;
  mb_u32 row_bytes;   // K · bits / 8
  mb_u32 groups;      // K / group_size
  mb_u32 group_size;
};
// linear_quantized_gathered: row r of x [R, K] through matrix ids[r] of E stacked matrices, each as `lin`
// describes one (M = 1, has_bias = 0: the per-row matvec); out [R, N].
struct QuantGatheredArgs {
  QuantLinearArgs lin;
  mb_u32 E;
};
// embedding_quantized: table [N rows, K columns] in `lin`, ids [T] i32, out [T, K] f32.
struct QuantEmbeddingArgs {
  QuantLinearArgs lin;
  mb_u32 T;
  float scale;
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

// linear_gathered (linear.metal): row r of x [R, K] through matrix ids[r] of w [E, N, K]; `row` holds
// M = 1, K, N, has_bias = 0 for the per-row matvec.
struct LinearGatheredArgs {
  LinearArgs row;
  mb_u32 E;
};

// ---- moe.metal ----
// route_weights: w / ids / out [T, K], scale [E].
struct RouteWeightsArgs {
  mb_u32 T;
  mb_u32 K;
  mb_u32 E;
};

// index_add: out [R, D] += weight[i] * src[i] at row index[i], i < n; has_weight = 0: weight is 1
// (the dispatch then binds an empty buffer in the weight slot, never read).
struct IndexAddArgs {
  mb_u32 n;
  mb_u32 D;
  mb_u32 has_weight;
};

// ---- conv.metal ----
// Conv2dArgs::bias_kind: the bias buffer's storage (kConvBiasNone: no bias; an empty buffer is bound).
enum ConvBiasKind : mb_u32 { kConvBiasNone = 0, kConvBiasF32 = 1, kConvBiasF16 = 2, kConvBiasBF16 = 3 };
// Tiling shared by the kernels and their dispatch (enumerators: compile-time constants in MSL and C++).
enum ConvTiling : mb_u32 {
  kConvCoTile = 8,      // conv2d: output channels per thread
  kConvTapChunk = 512,  // conv2d: taps staged per pass (kConvCoTile × 512 × 4 B = 16 KiB threadgroup memory)
  kDwMaxThreads = 256,  // depthwise: largest threadgroup (channels per group)
  kDwRows = 8,          // depthwise: time steps per thread
  kDwTapChunk = 16,     // depthwise: taps staged per pass (16 × 256 × 4 B = 16 KiB threadgroup memory)
};

// conv2d: x [batch, cin, h, w], w [cout, cin, kh, kw], out [batch, cout, ho, wo]; zero padding pad_h / pad_w.
struct Conv2dArgs {
  mb_u32 batch, cin, h, w;
  mb_u32 cout, kh, kw;
  mb_u32 ho, wo;
  mb_u32 stride_h, stride_w, pad_h, pad_w;
  mb_u32 bias_kind;  // ConvBiasKind
};

// depthwise_conv1d_causal: x [t, c], w [c, 1, k], out [t, c].
struct DepthwiseConv1dArgs {
  mb_u32 t, c, k;
};

// ---- pool.metal ----
enum AvgPoolLimits : mb_u32 { kPoolPlanMaxThreads = 1024 };  // the plan kernel's (single) threadgroup
// avg_pool_indexed, pass 1 (member lists): index [n] i32 with values in [-1, num_out).
struct AvgPoolPlanArgs {
  mb_u32 n, num_out;
};
// Pass 2 (sums): x [n, d] f32 -> out [num_out, d] f32, each sum divided by `divisor`.
struct AvgPoolSumArgs {
  mb_u32 d, num_out;
  float divisor;
};

// ---- shape.metal ----
// A strided copy of n elements over a shape of up to 4 dimensions (outermost first, padded with 1s in
// front): element (i0, i1, i2, i3) moves from src[src_base + Σ ik·src_stride[k]] to
// dst[dst_base + Σ ik·dst_stride[k]]. Offsets and strides in elements, relative to the start of the
// bound byte span (strides may be negative). Arrays of 4-byte scalars lay out alike in MSL and C++.
struct CopyArgs {
  mb_u32 n;
  mb_u32 size[4];
  mb_i32 src_stride[4];
  mb_i32 dst_stride[4];
  mb_i32 src_base, dst_base;
};

// ---- attention.metal ----
// q [T, Hq, d], out [T, Hq, d] contiguous; k / v row (s, h) at element k_offset + s·k_stride_s +
// h·k_stride_h of its bound span (the dispatch binds the bytes the strided view covers).
struct AttentionArgs {
  mb_u32 T;
  mb_u32 Hq;
  mb_u32 Hkv;
  mb_u32 group;  // Hq / Hkv: query head h reads kv head h / group
  mb_u32 d;
  mb_u32 S;
  mb_u32 k_offset;
  mb_i32 k_stride_s;
  mb_i32 k_stride_h;
  mb_u32 v_offset;
  mb_i32 v_stride_s;
  mb_i32 v_stride_h;
  float scale;
  float softcap;                 // 0 = none
  mb_u32 causal;                 // 0 / 1
  mb_u32 window;                 // 0 = unlimited
  mb_u32 block_overrides_window; // 0: Gemma 4 rule, 1: unified-12B rule
  mb_u32 has_blocks;             // 0: q_block / k_block are not bound and never read
  mb_u32 chunk;                  // decode: keys per chunk
  mb_u32 n_chunks;               // decode: chunks (1: the decode kernel writes out itself, no partials)
};

// Merge of the decode partials: rows = T·Hq, each with n_chunks partials of d + 3 floats.
struct AttentionMergeArgs {
  mb_u32 rows;
  mb_u32 d;
  mb_u32 n_chunks;
};

// local_attention (ops::local_attention): q, k, v, out [t, h, d], rel [w, h, d], all contiguous f32.
enum LocalAttentionLimits : mb_u32 { kLocalMaxWindow = 64 };  // logits of a row kept per thread
struct LocalAttentionArgs {
  mb_u32 t, h, d, w;
  float softcap;  // 0 = no cap
};
