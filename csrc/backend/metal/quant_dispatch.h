// Metal-backend dispatch for ops/quant.h (kernels: metal/quant.metal). Arguments are validated by the
// front door; this picks the kernel (matvec for M <= 4 rows or row_invariant, else tiled), sizes the grid,
// binds buffers.
#pragma once
#include "backend/metal/launcher.h"
#include "core/tensor.h"
#include "ops/params.h"

namespace mb::metal {

void linear_quantized(KernelLauncher& L, const Tensor& x, const ops::QuantizedMatrix& w, const Tensor* bias, Tensor& out,
                      bool row_invariant = false);
// Row r of x [R, K] through matrix ids[r] of the stacked w (q [E, N, row_bytes], scales / biases [E, N, groups]).
void linear_quantized_gathered(KernelLauncher& L, const Tensor& x, const ops::QuantizedMatrix& w, const Tensor& ids,
                               Tensor& out);
// ids: i32 (DeviceError for i64 ids, which no model passes).
void embedding_quantized(KernelLauncher& L, const ops::QuantizedMatrix& table, const Tensor& ids, Tensor& out,
                         float scale);

}  // namespace mb::metal
