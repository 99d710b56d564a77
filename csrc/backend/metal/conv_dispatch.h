// Metal-backend dispatch for ops/conv.h (kernels: metal/conv.metal). Arguments are validated by the
// front door; these pick the kernel, the grid and bind the buffers.
#pragma once
#include "backend/metal/launcher.h"
#include "core/tensor.h"
#include "ops/params.h"

namespace mb::metal {

// bias may be undefined.
void conv2d(KernelLauncher& L, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
            const ops::Conv2dParams& p);
void depthwise_conv1d_causal(KernelLauncher& L, const Tensor& x, const Tensor& w, Tensor& out);

}  // namespace mb::metal
