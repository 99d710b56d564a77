// Kernel choice, grid and argument binding for the embedding kernels (metal/embedding.metal).
#include <limits>

#include "backend/metal/embedding_dispatch.h"
#include "core/errors.h"
#include "kernel_args.h"

namespace mb::metal {

namespace {

static_assert(sizeof(EmbeddingArgs) == 12, "kernel_args.h layout changed");

// 256 threads x 4 elements per thread = 1024 elements of one output row per threadgroup (embedding.metal).
constexpr uint32_t kThreadsPerGroup = 256;
constexpr uint32_t kElementsPerThread = 4;

}  // namespace

void embedding(KernelLauncher& L, const Tensor& table, const Tensor& ids, Tensor& out, float scale) {
  const int64_t D = table.size(1), T = ids.size(0);
  if (T == 0 || D == 0) return;
  // Output offsets t*D + d are 64-bit in the kernel; D and T themselves are 32-bit arguments.
  if (D > int64_t(std::numeric_limits<uint32_t>::max()) || T > int64_t(std::numeric_limits<uint32_t>::max()))
    throw DeviceError(cat("embedding: [", T, ", ", D, "] exceeds the Metal kernel's 32-bit sizes"));
  const uint64_t per_group = uint64_t(kThreadsPerGroup) * kElementsPerThread;
  Dispatch d;
  d.kernel = cat("embedding_gather_", kernel_dtype_suffix(table.dtype(), "embedding"), "_", kernel_dtype_suffix(ids.dtype(), "embedding"), "_", kernel_dtype_suffix(out.dtype(), "embedding"));
  d.buffers = {BufferBinding::input(table), BufferBinding::input(ids), BufferBinding::output(out)};
  d.set_args(EmbeddingArgs{uint32_t(T), uint32_t(D), scale});
  d.grid = {uint32_t((uint64_t(D) + per_group - 1) / per_group), uint32_t(T), 1};
  d.group = {kThreadsPerGroup, 1, 1};
  L.dispatch(d);
}

}  // namespace mb::metal
