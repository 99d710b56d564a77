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
