// Dense linear layer: out = x · wᵀ + bias, the hot op of the engine (every projection and the logits).
#pragma once
#include "core/device.h"
#include "core/tensor.h"

namespace mb::ops {

// x: [..., K] f32 or bf16, contiguous
// w: [N, K] f32, bf16 or f16, contiguous (typically a read-only view into a mapped checkpoint)
// bias: [N] f32 / bf16 / f16, or nullptr
// out: [..., N], x's dtype, contiguous, must not overlap any input.
// Products are accumulated in f32 (whatever the storage), the bias is added to the f32 sum, and the
// result is rounded once to out's dtype.
void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out, const Exec& ex = {});

}  // namespace mb::ops
