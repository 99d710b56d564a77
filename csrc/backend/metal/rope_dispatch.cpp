// Kernel choice, grid and argument binding for rope / rope_2d (metal/rope.metal). Strided x and
// positions are bound as the byte span their elements cover, with element offsets and strides in the
// argument struct (32-bit signed, checked here).
#include <algorithm>
#include <limits>

#include "backend/metal/rope_dispatch.h"

#include <cstring>
#include "core/errors.h"
#include "kernel_args.h"

namespace mb::metal {

namespace {

static_assert(sizeof(RopeArgs) == 52, "kernel_args.h layout changed");

// Threads per threadgroup along a token's work items (one per rotated pair / passed-through dim).
constexpr uint32_t kMaxThreadsPerGroup = 256;

const char* position_variant(DType t, const char* op) {
  switch (t) {
    case DType::I32: return "p32";
    case DType::I64: return "p64";
    default: throw InputError(cat("internal: no ", op, " Metal kernel for positions of dtype ", dtype_name(t)));
  }
}

int32_t checked_i32(int64_t v, const char* op, const char* what) {
  if (v < int64_t(std::numeric_limits<int32_t>::min()) || v > int64_t(std::numeric_limits<int32_t>::max()))
    throw DeviceError(cat(op, ": ", what, " ", v, " exceeds the Metal kernels' 32-bit index range"));
  return int32_t(v);
}

// Fills the launch shape and the fields shared by rope and rope_2d.
void common_args(KernelLauncher& L, Dispatch& d, RopeArgs& a, const Tensor& x, const Tensor& positions,
                 const StridedBinding& xs, const StridedBinding& ps, uint32_t pairs, uint32_t items, const char* op) {
  const int64_t T = x.size(0), H = x.size(1), D = x.size(2);
  checked_i32(x.numel(), op, "element count of x");
  a.tokens = uint32_t(T);
  a.heads = uint32_t(H);
  a.head_dim = uint32_t(D);
  a.pairs = pairs;
  a.items = items;
  const uint32_t limit = std::min(kMaxThreadsPerGroup, L.max_threads_per_group(d.kernel));
  const uint32_t threads = std::min<uint32_t>(limit, (items + 31) / 32 * 32);
  a.groups_per_token = (items + threads - 1) / threads;
  a.x_offset = xs.offset;
  a.x_stride_t = checked_i32(x.stride(0), op, "stride of x");
  a.x_stride_h = checked_i32(x.stride(1), op, "stride of x");
  a.pos_offset = ps.offset;
  a.pos_stride_t = checked_i32(positions.stride(0), op, "stride of positions");
  a.pos_stride_k = positions.dim() > 1 ? checked_i32(positions.stride(1), op, "stride of positions") : 0;
  const int64_t groups = T * int64_t(a.groups_per_token);
  if (groups > int64_t(std::numeric_limits<uint32_t>::max()))
    throw DeviceError(cat(op, ": ", groups, " threadgroups exceed the grid's 32-bit range"));
  d.grid = {uint32_t(groups), 1, 1};
  d.group = {threads, 1, 1};
}

}  // namespace

void rope(KernelLauncher& L, const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& out) {
  if (x.numel() == 0) return;
  const int64_t D = x.size(2), n = inv_freq.size(0);
  const StridedBinding xs = bind_strided(x, false, "rope", "x"), ps = bind_strided(positions, false, "rope", "positions");
  Dispatch d;
  d.kernel = cat("rope_", position_variant(positions.dtype(), "rope"), "_", kernel_dtype_suffix(x.dtype(), "rope"));
  d.buffers = {xs.binding, ps.binding, BufferBinding::input(inv_freq), BufferBinding::output(out)};
  RopeArgs a{};
  // A thread per rotated pair; the same threads copy the dims [2n, d) when there are more of those.
  common_args(L, d, a, x, positions, xs, ps, uint32_t(n), uint32_t(std::max(n, D - 2 * n)), "rope");
  a.copy_tail = out.data() != x.data() ? 1u : 0u;  // in place, the passed-through dims are already right
  d.set_args(a);
  L.dispatch(d);
}

void rope_2d(KernelLauncher& L, const Tensor& x, const Tensor& positions, const std::vector<float>& inv_freq,
             Tensor& out) {
  if (x.numel() == 0) return;
  const int64_t q = x.size(2) / 4;
  if (int64_t(inv_freq.size()) != q) throw InputError(cat("internal: rope_2d needs ", q, " frequencies, got ", inv_freq.size()));
  const StridedBinding xs = bind_strided(x, false, "rope_2d", "x"),
                       ps = bind_strided(positions, false, "rope_2d", "positions");
  Dispatch d;
  d.kernel = cat("rope_2d_", position_variant(positions.dtype(), "rope_2d"), "_", kernel_dtype_suffix(x.dtype(), "rope_2d"));
  // The frequencies go into a tensor the command buffer keeps alive (the caller's vector may not be).
  Tensor inv = Tensor::empty(DType::F32, {q});
  std::memcpy(inv.data(), inv_freq.data(), inv_freq.size() * sizeof(float));
  d.buffers = {xs.binding, ps.binding, BufferBinding::input(inv), BufferBinding::output(out)};
  RopeArgs a{};
  // A thread per rotated pair of either half: 2q = d/2 per token.
  common_args(L, d, a, x, positions, xs, ps, uint32_t(q), uint32_t(2 * q), "rope_2d");
  a.copy_tail = 0;
  d.set_args(a);
  L.dispatch(d);
}

}  // namespace mb::metal
