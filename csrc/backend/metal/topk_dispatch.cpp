// Grid and argument binding for the topk kernel (metal/topk.metal): one threadgroup per row.
#include <limits>

#include "backend/metal/topk_dispatch.h"
#include "core/errors.h"
#include "kernel_args.h"

namespace mb::metal {

namespace {

static_assert(sizeof(TopkArgs) == 12, "kernel_args.h layout changed");

constexpr uint32_t kThreadsPerRow = 256;  // kTopkThreads in topk.metal (one thread per radix digit)

}  // namespace

void topk(KernelLauncher& L, const Tensor& x, int64_t k, Tensor& values, Tensor& indices) {
  const int64_t R = x.size(0), N = x.size(1);
  if (R == 0) return;
  // Row offsets are 64-bit in the kernel; R, N and k themselves are 32-bit arguments.
  if (R > int64_t(std::numeric_limits<uint32_t>::max()) || N > int64_t(std::numeric_limits<int32_t>::max()))
    throw DeviceError(cat("topk: x [", R, ", ", N, "] exceeds the Metal kernel's 32-bit sizes"));
  Dispatch d;
  d.kernel = "topk_select_f32";
  d.buffers = {BufferBinding::input(x), BufferBinding::output(values), BufferBinding::output(indices)};
  d.set_args(TopkArgs{uint32_t(R), uint32_t(N), uint32_t(k)});
  d.grid = {uint32_t(R), 1, 1};
  d.group = {kThreadsPerRow, 1, 1};
  L.dispatch(d);
}

}  // namespace mb::metal
