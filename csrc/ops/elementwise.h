// Elementwise ops: activations, softcap, clamp, scale (unary) and add / mul (binary).
// Storage f32, bf16 or f16 (output dtype = input dtype); math always in f32.
#pragma once
#include "core/device.h"
#include "core/tensor.h"

namespace mb::ops {

enum class UnaryKind { GeluTanh, Silu, Relu, Sigmoid, Softplus, Softcap, Clamp, Scale };

struct UnaryParams {
  UnaryKind kind = UnaryKind::Relu;
  float a = 0.f;  // Softcap: cap (> 0); Clamp: lower bound; Scale: factor
  float b = 0.f;  // Clamp: upper bound
};

enum class BinaryKind { Add, Mul };

// out = f(x). out may be x itself (same memory, in place) but not partially overlap it.
void unary(const Tensor& x, Tensor& out, const UnaryParams& p, const Exec& ex = {});
// out = a (+|*) b. b has a's shape, or a's trailing dims (broadcast over the leading ones), or one
// element. out may be a itself (in place).
void binary(const Tensor& a, const Tensor& b, Tensor& out, BinaryKind kind, const Exec& ex = {});

const char* unary_name(UnaryKind k);

}  // namespace mb::ops
