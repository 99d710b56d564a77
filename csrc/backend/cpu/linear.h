// CPU kernels for ops/linear.h. Arguments are validated by the front door.
#pragma once
#include "core/tensor.h"

namespace mb::cpu {

// Plain triple loop, one f32 accumulator per output, k in order.
void linear_ref(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out);
// Multithreaded over N, AVX2/FMA when available (portable lane-array fallback otherwise). bf16_products:
// with bf16 weights where bf16_products_enabled(), x is rounded to bf16 (more than 8 rows: gemm_bf16_products,
// gemm.h; fewer: the GEMV on the rounded x), so every path multiplies the same bf16 values.
void linear_fast(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out, bool bf16_products = false);

// linear_gathered (ops/linear.h): row r through w[ids[r]] with linear_ref, one row at a time.
void linear_gathered_ref(const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out);
// Rows grouped by matrix: each matrix used is read once for all its rows (gather, linear_fast, scatter).
void linear_gathered_fast(const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out);

}  // namespace mb::cpu
