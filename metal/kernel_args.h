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
