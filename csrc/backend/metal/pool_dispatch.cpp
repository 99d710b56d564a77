// Grids and argument binding for the index-mapped average pooling kernels (metal/pool.metal).
// Written only against KernelLauncher: the same code drives metal-sim and (later) Metal.
#include <algorithm>
#include <limits>

#include "backend/metal/pool_dispatch.h"
#include "core/errors.h"
#include "kernel_args.h"

namespace mb::metal {

namespace {

static_assert(sizeof(AvgPoolPlanArgs) == 8 && sizeof(AvgPoolSumArgs) == 12, "kernel_args.h layout changed");

// Sums: threads per group along the columns (one column each).
constexpr uint32_t kSumThreads = 256;

}  // namespace

void avg_pool_indexed(KernelLauncher& L, const Tensor& x, const Tensor& index, float divisor, Tensor& out) {
  const int64_t N = x.size(0), D = x.size(1), M = out.size(0);
  if (out.numel() == 0) return;
  if (N * D > int64_t(std::numeric_limits<uint32_t>::max()) || M * D > int64_t(std::numeric_limits<uint32_t>::max()) ||
      M >= int64_t(std::numeric_limits<uint32_t>::max()))
    throw DeviceError(cat("avg_pool_indexed: x ", x.describe(), " / out ", out.describe(),
                          " exceed the Metal kernels' 32-bit index range"));
  // Scratch (u32 in the kernels): start [M+1], cursor [M], members [N] (at least one element each).
  Tensor start = Tensor::empty(DType::I32, {M + 1});
  Tensor cursor = Tensor::empty(DType::I32, {std::max<int64_t>(M, 1)});
  Tensor members = Tensor::empty(DType::I32, {std::max<int64_t>(N, 1)});

  Dispatch plan;
  plan.kernel = "avg_pool_indexed_plan_i32";
  plan.buffers = {BufferBinding::input(index), BufferBinding::output(start), BufferBinding::output(cursor),
                  BufferBinding::output(members)};
  plan.set_args(AvgPoolPlanArgs{uint32_t(N), uint32_t(M)});
  plan.grid = {1, 1, 1};  // one threadgroup: the stable counting sort needs the whole list in order
  const int64_t plan_threads = std::clamp<int64_t>((N + 31) / 32 * 32, 32, kPoolPlanMaxThreads);
  plan.group = {uint32_t(plan_threads), 1, 1};
  // An empty index list still runs the plan: it zeroes start[] (every output then sums no rows).
  L.dispatch(plan);

  const uint32_t threads = uint32_t(std::clamp<int64_t>((D + 31) / 32 * 32, 32, kSumThreads));
  Dispatch sum;
  sum.kernel = "avg_pool_indexed_sum_f32";
  sum.buffers = {BufferBinding::input(x), BufferBinding::input(start), BufferBinding::input(members),
                 BufferBinding::output(out)};
  sum.set_args(AvgPoolSumArgs{uint32_t(D), uint32_t(M), divisor});
  sum.grid = {uint32_t(M), uint32_t((D + threads - 1) / threads), 1};
  sum.group = {threads, 1, 1};
  L.dispatch(sum);  // the bindings keep the scratch tensors alive until the command buffer completes
}

}  // namespace mb::metal
