// Metal-backend dispatch for ops/topk.h (kernel: metal/topk.metal). Arguments are validated by the
// front door.
#pragma once
#include <cstdint>

#include "backend/metal/launcher.h"
#include "core/tensor.h"

namespace mb::metal {

// x: [R, N] f32, 1 <= k <= N; values: [R, k] f32, indices: [R, k] i32.
void topk(KernelLauncher& L, const Tensor& x, int64_t k, Tensor& values, Tensor& indices);

}  // namespace mb::metal
