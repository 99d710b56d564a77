// Metal-backend dispatch for ops/embedding.h (kernels: metal/embedding.metal). Arguments (and every id)
// are validated by the front door.
#pragma once
#include "backend/metal/launcher.h"
#include "core/tensor.h"

namespace mb::metal {

// table: [V, D], ids: [T] i32 / i64, out: [T, D] f32 / bf16.
void embedding(KernelLauncher& L, const Tensor& table, const Tensor& ids, Tensor& out, float scale);

}  // namespace mb::metal
