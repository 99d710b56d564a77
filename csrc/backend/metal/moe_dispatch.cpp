// Grids and argument binding for the MoE routing kernels (metal/moe.metal).
#include "backend/metal/moe_dispatch.h"

#include "kernel_args.h"

namespace mb::metal {

namespace {

static_assert(sizeof(RouteWeightsArgs) == 12 && sizeof(IndexAddArgs) == 12, "kernel_args.h layout changed");

constexpr uint32_t kThreadsPerGroup = 256;

uint32_t groups_for(int64_t threads) { return uint32_t((threads + kThreadsPerGroup - 1) / kThreadsPerGroup); }

}  // namespace

void route_weights(KernelLauncher& L, const Tensor& w, const Tensor& ids, const Tensor& scale, Tensor& out_w,
                   Tensor& out_ids) {
  const int64_t T = w.size(0), K = w.size(1);
  if (T == 0 || K == 0) return;
  Dispatch d;
  d.kernel = "route_weights_f32";
  d.buffers = {BufferBinding::input(w), BufferBinding::input(ids), BufferBinding::input(scale), BufferBinding::output(out_w),
               BufferBinding::output(out_ids)};
  d.set_args(RouteWeightsArgs{uint32_t(T), uint32_t(K), uint32_t(scale.size(0))});
  d.grid = {groups_for(T), 1, 1};
  d.group = {kThreadsPerGroup, 1, 1};
  L.dispatch(d);
}

void index_add(KernelLauncher& L, Tensor& out, const Tensor& index, const Tensor& src, const Tensor* weight) {
  const int64_t n = index.size(0), D = out.size(1);
  if (n == 0 || D == 0) return;
  Dispatch d;
  d.kernel = "index_add_f32";
  d.buffers = {BufferBinding::input(index), BufferBinding::input(src), BufferBinding::optional_input(weight),
               BufferBinding::output(out)};
  d.set_args(IndexAddArgs{uint32_t(n), uint32_t(D), weight ? 1u : 0u});
  d.grid = {groups_for(D), 1, 1};
  d.group = {kThreadsPerGroup, 1, 1};
  L.dispatch(d);
}

}  // namespace mb::metal
