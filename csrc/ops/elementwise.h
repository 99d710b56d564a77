// Elementwise ops: activations, softcap, clamp, scale (unary) and add / mul (binary).
// Storage f32, bf16 or f16 (output dtype = input dtype); math always in f32.
#pragma once
#include "core/tensor.h"
#include "ops/exec.h"
#include "ops/params.h"

namespace mb::ops {

// out = f(x). out may be x itself (same memory, in place) but not partially overlap it.
void unary(const Tensor& x, Tensor& out, const UnaryParams& p, const Exec& ex = {});
// out = a (+|*) b. b has a's shape, or a's trailing dims (broadcast over the leading ones), or one
// element. out may be a itself (in place).
void binary(const Tensor& a, const Tensor& b, Tensor& out, BinaryKind kind, const Exec& ex = {});

}  // namespace mb::ops
