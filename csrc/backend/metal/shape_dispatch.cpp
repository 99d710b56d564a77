// Kernel choice, index-space coalescing and span binding for the shape kernels (metal/shape.metal).
// Written only against KernelLauncher: the same code drives metal-sim and (later) Metal.
#include <limits>

#include "backend/copy_layout.h"
#include "backend/metal/shape_dispatch.h"
#include "core/errors.h"
#include "kernel_args.h"

namespace mb::metal {

namespace {

static_assert(sizeof(CopyArgs) == 15 * 4, "kernel_args.h layout changed");

constexpr uint32_t kCopyThreads = 256;  // one element per thread
constexpr int kCopyRank = 4;            // dimensions a CopyArgs describes

const char* float_suffix(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    default: throw InputError(cat("internal: copy converts only among f32 / bf16 / f16, not ", dtype_name(t)));
  }
}

std::string copy_kernel(DType from, DType to) {
  if (from == to) return cat("copy_raw_b", 8 * dtype_itemsize(from));
  return cat("copy_from_", float_suffix(from), "_", float_suffix(to));
}

// dst = src elementwise; dst may be strided too (a slice of concat's output).
void copy_strided(KernelLauncher& L, const Tensor& src, Tensor& dst, const char* op) {
  const int64_t n = src.numel();
  if (n == 0) return;
  const CopyLayout lay = coalesce(src, dst);
  const StridedBinding s = bind_strided(src, /*writable=*/false, op, "input"),
                       t = bind_strided(dst, /*writable=*/true, op, "output");
  const int rank = int(lay.shape.size());
  const int outer = rank > kCopyRank ? rank - kCopyRank : 0;  // dimensions walked here, one dispatch each
  CopyArgs a{};
  int64_t inner_n = 1;
  for (int k = 0; k < kCopyRank; ++k) {
    const int d = outer + k - (rank > kCopyRank ? 0 : kCopyRank - rank);  // source dimension, < outer = padding
    const bool pad = d < outer || d >= rank;
    a.size[k] = pad ? 1 : uint32_t(lay.shape[size_t(d)]);
    a.src_stride[k] = pad ? 0 : int32_t(lay.ss[size_t(d)]);
    a.dst_stride[k] = pad ? 0 : int32_t(lay.ds[size_t(d)]);
    inner_n *= a.size[k];
  }
  if (inner_n > int64_t(std::numeric_limits<uint32_t>::max()))
    throw DeviceError(cat(op, ": ", inner_n, " elements exceed the Metal kernels' 32-bit index range"));
  a.n = uint32_t(inner_n);
  Dispatch d;
  d.kernel = copy_kernel(src.dtype(), dst.dtype());
  d.buffers = {s.binding, t.binding};
  d.grid = {uint32_t((inner_n + kCopyThreads - 1) / kCopyThreads), 1, 1};
  d.group = {kCopyThreads, 1, 1};
  // More than 4 dimensions left after coalescing: one dispatch per index of the outer ones (odometer).
  std::vector<int64_t> idx(size_t(outer), 0);
  for (;;) {
    int64_t so = s.offset, dof = t.offset;
    for (int k = 0; k < outer; ++k) {
      so += idx[size_t(k)] * lay.ss[size_t(k)];
      dof += idx[size_t(k)] * lay.ds[size_t(k)];
    }
    a.src_base = int32_t(so);
    a.dst_base = int32_t(dof);
    d.set_args(a);
    L.dispatch(d);
    int k = outer - 1;
    for (; k >= 0; --k) {
      if (++idx[size_t(k)] < lay.shape[size_t(k)]) break;
      idx[size_t(k)] = 0;
    }
    if (k < 0) break;
  }
}

}  // namespace

void copy(KernelLauncher& L, const Tensor& src, Tensor& out) { copy_strided(L, src, out, "copy"); }

void concat(KernelLauncher& L, const std::vector<Tensor>& tensors, int64_t dim, Tensor& out) {
  int64_t off = 0;
  for (const Tensor& t : tensors) {
    if (t.numel() > 0) {
      Tensor part = out.slice(dim, off, off + t.size(dim));
      copy_strided(L, t, part, "concat");
    }
    off += t.size(dim);
  }
}

}  // namespace mb::metal
