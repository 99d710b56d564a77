// Kernel choice, grid and argument binding for the elementwise kernels (metal/elementwise.metal).
// Written only against KernelLauncher: the same code drives metal-sim and (later) Metal.
#include <limits>

#include "backend/metal/elementwise_dispatch.h"
#include "core/errors.h"
#include "kernel_args.h"

namespace mb::metal {

namespace {

// 256 threads x 4 elements per thread = 1024 elements per threadgroup (elementwise.metal).
constexpr uint32_t kThreadsPerGroup = 256;
constexpr uint32_t kElementsPerThread = 4;

static_assert(sizeof(UnaryArgs) == 12 && sizeof(BinaryArgs) == 8, "kernel_args.h layout changed");

uint32_t checked_u32(int64_t n, const char* op) {
  if (n < 0 || n > int64_t(std::numeric_limits<uint32_t>::max()))
    throw DeviceError(cat(op, ": ", n, " elements exceed the Metal kernels' 32-bit index range"));
  return uint32_t(n);
}

Size3 grid_for(uint32_t n) {
  const uint64_t per_group = uint64_t(kThreadsPerGroup) * kElementsPerThread;
  return {uint32_t((uint64_t(n) + per_group - 1) / per_group), 1, 1};
}

}  // namespace

void unary(KernelLauncher& L, const Tensor& x, Tensor& out, const ops::UnaryParams& p) {
  const char* op = ops::unary_name(p.kind);
  const uint32_t n = checked_u32(x.numel(), op);
  if (n == 0) return;
  Dispatch d;
  d.kernel = cat(op, "_contig_", kernel_dtype_suffix(x.dtype(), "elementwise"));
  d.buffers = {BufferBinding::input(x), BufferBinding::output(out)};
  d.set_args(UnaryArgs{n, p.a, p.b});
  d.grid = grid_for(n);
  d.group = {kThreadsPerGroup, 1, 1};
  L.dispatch(d);
}

void binary(KernelLauncher& L, const Tensor& a, const Tensor& b, Tensor& out, ops::BinaryKind k) {
  const char* op = k == ops::BinaryKind::Add ? "add" : "mul";
  const uint32_t n = checked_u32(a.numel(), op);
  const uint32_t nb = checked_u32(b.numel(), op);
  if (n == 0) return;
  Dispatch d;
  d.kernel = cat(op, nb == n ? "_same_" : "_row_", kernel_dtype_suffix(a.dtype(), "elementwise"));
  d.buffers = {BufferBinding::input(a), BufferBinding::input(b), BufferBinding::output(out)};
  d.set_args(BinaryArgs{n, nb});
  d.grid = grid_for(n);
  d.group = {kThreadsPerGroup, 1, 1};
  L.dispatch(d);
}

}  // namespace mb::metal
