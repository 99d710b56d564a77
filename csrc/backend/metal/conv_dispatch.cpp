// Kernel choice, grid and argument binding for the convolution kernels (metal/conv.metal).
// Written only against KernelLauncher: the same code drives metal-sim and (later) Metal.
#include <algorithm>
#include <limits>

#include "backend/metal/conv_dispatch.h"
#include "core/errors.h"
#include "kernel_args.h"

namespace mb::metal {

namespace {

static_assert(sizeof(Conv2dArgs) == 14 * 4 && sizeof(DepthwiseConv1dArgs) == 3 * 4, "kernel_args.h layout changed");

// conv2d: output positions per threadgroup (one thread each).
constexpr uint32_t kConvThreads = 256;

uint32_t bias_kind(const Tensor& bias) {
  if (!bias.defined()) return kConvBiasNone;
  switch (bias.dtype()) {
    case DType::F32: return kConvBiasF32;
    case DType::F16: return kConvBiasF16;
    case DType::BF16: return kConvBiasBF16;
    default: throw InputError(cat("internal: no conv2d Metal kernel for bias dtype ", dtype_name(bias.dtype())));
  }
}

// Every index the kernels form is a 32-bit unsigned product of these extents.
void check_u32(int64_t elements, const char* op, const char* what) {
  if (elements > int64_t(std::numeric_limits<uint32_t>::max()))
    throw DeviceError(cat(op, ": ", what, " has ", elements, " elements, beyond the Metal kernels' 32-bit index range"));
}

uint32_t u32(int64_t v) { return uint32_t(v); }

uint32_t round_up_to_simd(int64_t n, uint32_t cap) {
  return uint32_t(std::min<int64_t>(cap, std::max<int64_t>(32, (n + 31) / 32 * 32)));
}

}  // namespace

void conv2d(KernelLauncher& L, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
            const ops::Conv2dParams& p) {
  if (out.numel() == 0) return;
  check_u32(x.numel(), "conv2d", "x");
  check_u32(w.numel(), "conv2d", "w");
  check_u32(out.numel(), "conv2d", "out");
  if (p.stride_h > INT32_MAX || p.stride_w > INT32_MAX || p.pad_h > INT32_MAX / 2 || p.pad_w > INT32_MAX / 2)
    throw DeviceError("conv2d: stride / padding beyond the Metal kernel's 32-bit range");
  Conv2dArgs a{};
  a.batch = u32(x.size(0));
  a.cin = u32(x.size(1));
  a.h = u32(x.size(2));
  a.w = u32(x.size(3));
  a.cout = u32(w.size(0));
  a.kh = u32(w.size(2));
  a.kw = u32(w.size(3));
  a.ho = u32(out.size(2));
  a.wo = u32(out.size(3));
  a.stride_h = u32(p.stride_h);
  a.stride_w = u32(p.stride_w);
  a.pad_h = u32(p.pad_h);
  a.pad_w = u32(p.pad_w);
  a.bias_kind = bias_kind(bias);
  const int64_t plane = out.size(2) * out.size(3);
  const uint32_t threads = round_up_to_simd(plane, kConvThreads);  // small images: no idle simdgroups
  Dispatch d;
  d.kernel = cat("conv2d_direct_", kernel_dtype_suffix(w.dtype(), "convolution"));
  d.buffers = {BufferBinding::input(x), BufferBinding::input(w), BufferBinding::optional_input(&bias),
               BufferBinding::output(out)};
  d.set_args(a);
  d.grid = {u32((plane + threads - 1) / threads), u32((out.size(1) + kConvCoTile - 1) / kConvCoTile), u32(out.size(0))};
  d.group = {threads, 1, 1};
  L.dispatch(d);
}

void depthwise_conv1d_causal(KernelLauncher& L, const Tensor& x, const Tensor& w, Tensor& out) {
  if (out.numel() == 0) return;
  check_u32(x.numel(), "depthwise_conv1d_causal", "x");
  check_u32(w.numel(), "depthwise_conv1d_causal", "w");
  const int64_t T = x.size(0), C = x.size(1);
  const uint32_t threads = round_up_to_simd(C, kDwMaxThreads);
  Dispatch d;
  d.kernel = cat("depthwise_conv1d_causal_direct_", kernel_dtype_suffix(w.dtype(), "convolution"));
  d.buffers = {BufferBinding::input(x), BufferBinding::input(w), BufferBinding::output(out)};
  d.set_args(DepthwiseConv1dArgs{u32(T), u32(C), u32(w.size(2))});
  d.grid = {u32((C + threads - 1) / threads), u32((T + kDwRows - 1) / kDwRows), 1};
  d.group = {threads, 1, 1};
  L.dispatch(d);
}

}  // namespace mb::metal
