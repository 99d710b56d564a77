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
