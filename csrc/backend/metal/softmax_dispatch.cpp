// Kernel choice, grid and argument binding for softmax (metal/softmax.metal): one threadgroup per row.
#include "backend/metal/norm_dispatch.h"
#include "backend/metal/softmax_dispatch.h"
#include "core/errors.h"
#include "kernel_args.h"

namespace mb::metal {

static_assert(sizeof(SoftmaxArgs) == 8, "kernel_args.h layout changed");

void softmax(KernelLauncher& L, const Tensor& x, Tensor& out) {
  const uint32_t n = row_kernel_u32(x.numel(), "softmax");
  if (n == 0) return;
  const uint32_t cols = uint32_t(x.size(-1)), rows = n / cols;
  Dispatch d;
  d.kernel = cat("softmax_row_", kernel_dtype_suffix(x.dtype(), "softmax"));
  d.buffers = {BufferBinding::input(x), BufferBinding::output(out)};
  d.set_args(SoftmaxArgs{rows, cols});
  d.grid = {rows, 1, 1};
  d.group = {row_kernel_threads(L, d.kernel, cols), 1, 1};
  L.dispatch(d);
}

}  // namespace mb::metal
