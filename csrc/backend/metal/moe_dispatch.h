// Metal-backend dispatch for ops/moe.h (kernels: metal/moe.metal). Arguments are validated by the
// front door.
#pragma once
#include "backend/metal/launcher.h"
#include "core/tensor.h"

namespace mb::metal {

// w / ids / out_w / out_ids: [T, K]; scale: [E]. One thread per row.
void route_weights(KernelLauncher& L, const Tensor& w, const Tensor& ids, const Tensor& scale, Tensor& out_w,
                   Tensor& out_ids);
// out: [R, D]; index: [n]; src: [n, D]; weight: [n] or nullptr. One thread per column.
void index_add(KernelLauncher& L, Tensor& out, const Tensor& index, const Tensor& src, const Tensor* weight);

}  // namespace mb::metal
