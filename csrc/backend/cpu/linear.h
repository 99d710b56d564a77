// CPU kernels for ops/linear.h. Arguments are validated by the front door.
#pragma once
#include "core/tensor.h"

namespace mb::cpu {

// Plain triple loop, one f32 accumulator per output, k in order.
void linear_ref(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out);
// Multithreaded over N, AVX2/FMA when available (portable lane-array fallback otherwise). bf16_products:
// more than a few rows times bf16 weights may take gemm_bf16_products (x rounded to bf16, gemm.h).
void linear_fast(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out, bool bf16_products = false);

// linear_gathered (ops/linear.h): row r through w[ids[r]] with linear_ref, one row at a time.
void linear_gathered_ref(const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out);
// Rows grouped by matrix: each matrix used is read once for all its rows (gather, linear_fast, scatter).
void linear_gathered_fast(const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out);

}  // namespace mb::cpu
