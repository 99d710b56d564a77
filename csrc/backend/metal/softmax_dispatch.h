// Metal-backend dispatch for ops/softmax.h (kernels: metal/softmax.metal). Arguments are validated by
// the front door; this picks the kernel, the grid and binds the buffers.
#pragma once
#include "backend/metal/launcher.h"
#include "core/tensor.h"

namespace mb::metal {

void softmax(KernelLauncher& L, const Tensor& x, Tensor& out);

}  // namespace mb::metal
