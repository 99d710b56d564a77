// Kernel choice, grids and argument binding for the quantized-weight kernels (metal/quant.metal).
#include "backend/metal/quant_dispatch.h"

#include <limits>

#include "core/errors.h"
#include "kernel_args.h"

namespace mb::metal {

namespace {

static_assert(sizeof(QuantLinearArgs) == 7 * 4 && sizeof(QuantEmbeddingArgs) == 9 * 4 &&
                  sizeof(QuantGatheredArgs) == 8 * 4,
              "kernel_args.h layout changed");

constexpr int64_t kMatvecMaxM = 4;
constexpr uint32_t kMatvecRowsPerSimdgroup = 4, kMatvecSimdgroups = 4;  // 16 rows of w per threadgroup
constexpr uint32_t kTile = 32, kTiledThreads = 256;
constexpr uint32_t kGatherThreads = 256;

uint32_t checked_u32(int64_t n, const char* op, const char* what) {
  if (n < 0 || n > int64_t(std::numeric_limits<uint32_t>::max()))
    throw DeviceError(cat(op, ": ", what, " = ", n, " exceeds the Metal kernels' 32-bit index range"));
  return uint32_t(n);
}

uint32_t ceil_div(uint32_t a, uint32_t b) { return uint32_t((uint64_t(a) + b - 1) / b); }

QuantLinearArgs args_of(const ops::QuantizedMatrix& w, int64_t M, bool has_bias, const char* op) {
  QuantLinearArgs a{};
  a.M = checked_u32(M, op, "rows of x");
  a.K = checked_u32(w.cols(), op, "K");
  a.N = checked_u32(w.rows(), op, "N");
  a.has_bias = has_bias ? 1u : 0u;
  a.row_bytes = checked_u32(w.q.size(1), op, "row bytes");
  a.groups = checked_u32(w.scales.size(1), op, "groups");
  a.group_size = uint32_t(w.group_size);
  checked_u32(M * w.cols(), op, "M*K");
  checked_u32(w.rows() * w.cols(), op, "N*K");
  checked_u32(M * w.rows(), op, "M*N");
  return a;
}

}  // namespace

void linear_quantized(KernelLauncher& L, const Tensor& x, const ops::QuantizedMatrix& w, const Tensor* bias, Tensor& out,
                      bool row_invariant) {
  const int64_t K = x.size(-1), M = K ? x.numel() / K : 0;
  if (M == 0 || w.rows() == 0) return;
  const QuantLinearArgs a = args_of(w, M, bias != nullptr, "linear_quantized");
  const char* sd = kernel_dtype_suffix(w.scales.dtype(), "linear_quantized");
  const char* bd = bias ? kernel_dtype_suffix(bias->dtype(), "linear_quantized") : sd;
  const bool matvec = M <= kMatvecMaxM || row_invariant;  // (slabs of 4 rows, one grid row each)
  Dispatch d;
  d.kernel = cat("linear_quantized_", matvec ? "matvec" : "tiled", "_q", w.bits, "_", sd, "_", bd);
  d.buffers = {BufferBinding::input(x), BufferBinding::input(w.q), BufferBinding::input(w.scales),
               BufferBinding::input(w.biases), BufferBinding::optional_input(bias), BufferBinding::output(out)};
  d.set_args(a);
  if (matvec) {
    d.grid = {ceil_div(a.N, kMatvecRowsPerSimdgroup * kMatvecSimdgroups), ceil_div(a.M, uint32_t(kMatvecMaxM)), 1};
    d.group = {32 * kMatvecSimdgroups, 1, 1};
  } else {
    d.grid = {ceil_div(a.N, kTile), ceil_div(a.M, kTile), 1};
    d.group = {kTiledThreads, 1, 1};
  }
  L.dispatch(d);
}

void linear_quantized_gathered(KernelLauncher& L, const Tensor& x, const ops::QuantizedMatrix& w, const Tensor& ids,
                               Tensor& out) {
  const int64_t R = x.size(0), E = w.q.size(0);
  if (R == 0 || w.q.size(1) == 0) return;
  if (ids.dtype() != DType::I32)
    throw DeviceError(cat("linear_quantized_gathered: the Metal kernel takes i32 ids, got ", dtype_name(ids.dtype())));
  const ops::QuantizedMatrix first = w.matrix(0);  // one matrix's shape (the kernel offsets by ids[r] in 64 bits)
  QuantGatheredArgs g{};
  g.lin = args_of(first, 1, false, "linear_quantized_gathered");
  g.E = checked_u32(E, "linear_quantized_gathered", "E");
  checked_u32(R * w.q.size(1), "linear_quantized_gathered", "R*N");
  checked_u32(R * first.cols(), "linear_quantized_gathered", "R*K");
  Dispatch d;
  d.kernel = cat("linear_quantized_gathered_q", w.bits, "_", kernel_dtype_suffix(w.scales.dtype(), "linear_quantized_gathered"));
  d.buffers = {BufferBinding::input(x), BufferBinding::input(w.q), BufferBinding::input(w.scales),
               BufferBinding::input(w.biases), BufferBinding::input(ids), BufferBinding::output(out)};
  d.set_args(g);
  d.grid = {ceil_div(g.lin.N, kMatvecRowsPerSimdgroup * kMatvecSimdgroups), uint32_t(R), 1};
  d.group = {32 * kMatvecSimdgroups, 1, 1};
  L.dispatch(d);
}

void embedding_quantized(KernelLauncher& L, const ops::QuantizedMatrix& table, const Tensor& ids, Tensor& out,
                         float scale) {
  const int64_t T = ids.size(0), D = table.cols();
  if (T == 0 || D == 0) return;
  if (ids.dtype() != DType::I32)
    throw DeviceError(cat("embedding_quantized: the Metal kernel takes i32 ids, got ", dtype_name(ids.dtype())));
  QuantEmbeddingArgs e{};
  e.lin = args_of(table, 1, false, "embedding_quantized");
  e.T = checked_u32(T, "embedding_quantized", "T");
  e.scale = scale;
  Dispatch d;
  d.kernel = cat("embedding_quantized_q", table.bits, "_", kernel_dtype_suffix(table.scales.dtype(), "embedding_quantized"));
  d.buffers = {BufferBinding::input(table.q), BufferBinding::input(table.scales), BufferBinding::input(table.biases),
               BufferBinding::input(ids), BufferBinding::output(out)};
  d.set_args(e);
  d.grid = {ceil_div(uint32_t(D), kGatherThreads), e.T, 1};
  d.group = {kGatherThreads, 1, 1};
  L.dispatch(d);
}

}  // namespace mb::metal
