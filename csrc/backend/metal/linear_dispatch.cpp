// Kernel choice, grid and argument binding for the linear kernels (metal/linear.metal).
// Written only against KernelLauncher: the same code drives metal-sim and (later) Metal.
#include <cstdlib>
#include <cstring>
#include <limits>

#include "backend/metal/linear_dispatch.h"
#include "core/errors.h"
#include "kernel_args.h"

namespace mb::metal {

namespace {

static_assert(sizeof(LinearArgs) == 16 && sizeof(LinearGatheredArgs) == 20, "kernel_args.h layout changed");

// Must match metal/linear.metal.
constexpr uint32_t kMatvecRowsPerSimdgroup = 4;
constexpr uint32_t kMatvecSimdgroups = 4;  // 128 threads: 16 rows of w per threadgroup
constexpr uint32_t kTile = 32;             // out tile of simdmm and tiled: 32 x 32
constexpr uint32_t kSimdmmThreads = 128;
constexpr uint32_t kTiledThreads = 256;

// The kernels index with 32-bit products (m*K + k, n*K + k, m*N + n).
uint32_t checked_u32(int64_t n, const char* what) {
  if (n < 0 || n > int64_t(std::numeric_limits<uint32_t>::max()))
    throw DeviceError(cat("linear: ", what, " = ", n, " exceeds the Metal kernels' 32-bit index range"));
  return uint32_t(n);
}

uint32_t ceil_div(uint32_t a, uint32_t b) { return uint32_t((uint64_t(a) + b - 1) / b); }

}  // namespace

const char* linear_variant(int64_t M, bool row_invariant) {
  if (M <= kLinearMatvecMaxM || row_invariant) return "matvec";
  const char* env = std::getenv("MARKBASE_METAL_LINEAR");
  if (!env || !*env || std::strcmp(env, "simdgroup") == 0) return "simdmm";
  if (std::strcmp(env, "portable") == 0) return "tiled";
  throw InputError(cat("linear: MARKBASE_METAL_LINEAR must be 'simdgroup' or 'portable', got '", env, "'"));
}

void linear(KernelLauncher& L, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out, bool row_invariant) {
  const int64_t K = x.size(-1), N = w.size(0);
  int64_t M = 1;  // rows of x: the product of its leading dimensions
  for (int64_t i = 0; i + 1 < x.dim(); ++i) M *= x.size(i);
  if (M == 0 || N == 0) return;
  checked_u32(M * K, "M*K");
  checked_u32(N * K, "N*K");
  checked_u32(M * N, "M*N");
  const LinearArgs args{uint32_t(M), uint32_t(K), uint32_t(N), bias ? 1u : 0u};
  const char* variant = linear_variant(M, row_invariant);

  Dispatch d;
  // Without a bias the kernel never reads buffer(2) (empty binding); its name takes bias dtype = w dtype.
  const DType bias_dtype = bias ? bias->dtype() : w.dtype();
  d.kernel = cat("linear_", variant, "_", kernel_dtype_suffix(x.dtype(), "linear"), "_",
                 kernel_dtype_suffix(w.dtype(), "linear"), "_", kernel_dtype_suffix(bias_dtype, "linear"));
  d.buffers = {BufferBinding::input(x), BufferBinding::input(w), BufferBinding::optional_input(bias),
               BufferBinding::output(out)};
  d.set_args(args);
  if (std::strcmp(variant, "matvec") == 0) {
    // grid row y: x rows [4y, 4y + 4) (metal/linear.metal)
    d.grid = {ceil_div(args.N, kMatvecRowsPerSimdgroup * kMatvecSimdgroups), ceil_div(args.M, kLinearMatvecMaxM), 1};
    d.group = {32 * kMatvecSimdgroups, 1, 1};
  } else {
    d.grid = {ceil_div(args.N, kTile), ceil_div(args.M, kTile), 1};
    d.group = {std::strcmp(variant, "simdmm") == 0 ? kSimdmmThreads : kTiledThreads, 1, 1};
  }
  L.dispatch(d);
}

void linear_gathered(KernelLauncher& L, const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out) {
  const int64_t R = x.size(0), K = x.size(1), E = w.size(0), N = w.size(1);
  if (R == 0 || N == 0) return;
  checked_u32(R * K, "R*K");
  checked_u32(N * K, "N*K");  // within one matrix; the matrix offset is 64-bit in the kernel
  checked_u32(R * N, "R*N");
  checked_u32(E, "E");
  Dispatch d;
  d.kernel = cat("linear_gathered_f32_", kernel_dtype_suffix(w.dtype(), "linear_gathered"));
  d.buffers = {BufferBinding::input(x), BufferBinding::input(w), BufferBinding::input(ids), BufferBinding::output(out)};
  d.set_args(LinearGatheredArgs{LinearArgs{1u, uint32_t(K), uint32_t(N), 0u}, uint32_t(E)});
  d.grid = {ceil_div(uint32_t(N), kMatvecRowsPerSimdgroup * kMatvecSimdgroups), uint32_t(R), 1};
  d.group = {kMatvecSimdgroups * 32, 1, 1};
  L.dispatch(d);
}

}  // namespace mb::metal
