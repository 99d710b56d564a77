// Metal-backend dispatch for ops/rope.h (kernels: metal/rope.metal). Arguments are validated by the
// front doors; these pick the kernel, the grid and bind the buffers. x and positions may be strided.
#pragma once
#include <vector>

#include "backend/metal/launcher.h"
#include "core/tensor.h"

namespace mb::metal {

// x: [T, H, d] (last dim contiguous); positions: [T] i32 / i64; inv_freq: [n] f32; out: [T, H, d].
void rope(KernelLauncher& L, const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& out);

// x: [N, H, d]; positions: [N, 2] i32 / i64; inv_freq: the d/4 host frequencies (ops::rope_inv_freq).
void rope_2d(KernelLauncher& L, const Tensor& x, const Tensor& positions, const std::vector<float>& inv_freq,
             Tensor& out);

}  // namespace mb::metal
