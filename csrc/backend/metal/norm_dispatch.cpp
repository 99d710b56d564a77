// Kernel choice, grid and argument binding for rms_norm / layer_norm (metal/norm.metal), and the
// row-kernel helpers softmax_dispatch.cpp shares. Written only against KernelLauncher: the same code
// drives metal-sim and (later) Metal.
#include <algorithm>
#include <limits>

#include "backend/metal/norm_dispatch.h"
#include "core/errors.h"
#include "kernel_args.h"

namespace mb::metal {

namespace {

static_assert(sizeof(NormArgs) == 20, "kernel_args.h layout changed");

// Storage of the optional [D] parameters: the one given, or f32 (never read) if there are none.
DType param_dtype(const Tensor& a, const Tensor& b = {}) {
  if (a.defined()) return a.dtype();
  if (b.defined()) return b.dtype();
  return DType::F32;
}

// An optional parameter: the tensor, or an empty binding the kernel never reads.

}  // namespace

uint32_t row_kernel_u32(int64_t n, const char* op) {
  if (n < 0 || n > int64_t(std::numeric_limits<uint32_t>::max()))
    throw DeviceError(cat(op, ": ", n, " elements exceed the Metal kernels' 32-bit index range"));
  return uint32_t(n);
}

uint32_t row_kernel_threads(KernelLauncher& L, const std::string& kernel, int64_t cols) {
  const uint32_t limit = std::min<uint32_t>(1024, L.max_threads_per_group(kernel)) / 32 * 32;
  if (limit == 0) throw DeviceError(cat(kernel, ": the pipeline allows fewer than 32 threads per threadgroup"));
  const int64_t per_four = (cols + 3) / 4;
  const int64_t rounded = (per_four + 31) / 32 * 32;
  return uint32_t(std::clamp<int64_t>(rounded, 32, limit));
}

void rms_norm(KernelLauncher& L, const Tensor& x, const Tensor& weight, float eps, Tensor& out) {
  const uint32_t n = row_kernel_u32(x.numel(), "rms_norm");
  if (n == 0) return;
  const uint32_t cols = uint32_t(x.size(-1)), rows = n / cols;
  Dispatch d;
  d.kernel = cat("rms_norm_w", kernel_dtype_suffix(param_dtype(weight), "rms_norm"), "_", kernel_dtype_suffix(x.dtype(), "rms_norm"));
  d.buffers = {BufferBinding::input(x), BufferBinding::optional_input(&weight), BufferBinding::output(out)};
  d.set_args(NormArgs{rows, cols, eps, weight.defined() ? 1u : 0u, 0u});
  d.grid = {rows, 1, 1};
  d.group = {row_kernel_threads(L, d.kernel, cols), 1, 1};
  L.dispatch(d);
}

void layer_norm(KernelLauncher& L, const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out) {
  const uint32_t n = row_kernel_u32(x.numel(), "layer_norm");
  if (n == 0) return;
  const uint32_t cols = uint32_t(x.size(-1)), rows = n / cols;
  Dispatch d;
  d.kernel = cat("layer_norm_w", kernel_dtype_suffix(param_dtype(weight, bias), "layer_norm"), "_",
                 kernel_dtype_suffix(x.dtype(), "layer_norm"));
  d.buffers = {BufferBinding::input(x), BufferBinding::optional_input(&weight), BufferBinding::optional_input(&bias), BufferBinding::output(out)};
  d.set_args(NormArgs{rows, cols, eps, weight.defined() ? 1u : 0u, bias.defined() ? 1u : 0u});
  d.grid = {rows, 1, 1};
  d.group = {row_kernel_threads(L, d.kernel, cols), 1, 1};
  L.dispatch(d);
}

}  // namespace mb::metal
