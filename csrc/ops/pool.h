// Index-mapped average pooling (the Gemma 4 vision pooler: 3×3 patch blocks → one soft token each).
#pragma once
#include "core/tensor.h"
#include "ops/exec.h"

namespace mb::ops {

// out[m] = (Σ_{n : index[n] == m} x[n]) / divisor, summed in increasing n, in f32. index[n] == −1 skips
// row n (padding); outputs with no member are 0. Every index must lie in [−1, num_out).
//   x: [N, D] f32; index: [N] i32; out: [num_out, D] f32.
void avg_pool_indexed(const Tensor& x, const Tensor& index, int64_t num_out, float divisor, Tensor& out,
                      const Exec& ex = {});

}  // namespace mb::ops
