// Metal-backend dispatch for ops/shape.h (kernels: metal/shape.metal). Arguments are validated by the
// front door; these coalesce the index space, pick the kernel and bind the byte spans of the views.
#pragma once
#include <vector>

#include "backend/metal/launcher.h"
#include "core/tensor.h"

namespace mb::metal {

// out = src (any strides, any plain dtype; f32 / bf16 / f16 convert). out: contiguous.
void copy(KernelLauncher& L, const Tensor& src, Tensor& out);
// out = tensors joined along dim (0 <= dim < rank): one strided copy per non-empty part.
void concat(KernelLauncher& L, const std::vector<Tensor>& tensors, int64_t dim, Tensor& out);

}  // namespace mb::metal
