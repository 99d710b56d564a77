// Top-k along the last dimension (MoE routing, sampling).
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/exec.h"

namespace mb::ops {

// x: [R, N] f32 contiguous; 1 <= k <= N.
// values: [R, k] f32, each row sorted descending; indices: [R, k] i32 (positions in x's row).
// Order as torch.topk: NaN ranks above every number; equal values (and NaNs) keep the lower index first.
void topk(const Tensor& x, int64_t k, Tensor& values, Tensor& indices, const Exec& ex = {});

}  // namespace mb::ops
