// Metal-backend dispatch for ops/elementwise.h (kernels: metal/elementwise.metal). Arguments are
// validated by the front door; these pick the kernel, the grid and bind the buffers.
#pragma once
#include "backend/metal/launcher.h"
#include "core/tensor.h"
#include "ops/params.h"

namespace mb::metal {

void unary(KernelLauncher& L, const Tensor& x, Tensor& out, const ops::UnaryParams& p);
void binary(KernelLauncher& L, const Tensor& a, const Tensor& b, Tensor& out, ops::BinaryKind k);

}  // namespace mb::metal
