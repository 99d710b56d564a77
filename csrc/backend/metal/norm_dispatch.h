// Metal-backend dispatch for ops/norm.h (kernels: metal/norm.metal), and the helpers of the
// one-row-per-threadgroup kernels (norm, softmax). Arguments are validated by the front doors; these
// pick the kernel, the grid and bind the buffers.
#pragma once
#include <cstdint>
#include <string>

#include "backend/metal/launcher.h"
#include "core/tensor.h"

namespace mb::metal {

// weight (and bias) may be undefined Tensors (absent).
void rms_norm(KernelLauncher& L, const Tensor& x, const Tensor& weight, float eps, Tensor& out);
void layer_norm(KernelLauncher& L, const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out);

// Threads per threadgroup for a one-row-per-group kernel over rows of `cols` elements: a multiple of 32
// (whole simdgroups, as metal/norm_reduce.h requires), about 4 elements per thread, 32 to 1024 (and
// never above the kernel's pipeline limit).
uint32_t row_kernel_threads(KernelLauncher& L, const std::string& kernel, int64_t cols);

// The 32-bit element count the row kernels index with; DeviceError naming `op` beyond that.
uint32_t row_kernel_u32(int64_t n, const char* op);

}  // namespace mb::metal
