// CPU kernels for ops/linear.h. Arguments are validated by the front door.
#pragma once
#include "core/tensor.h"
#include "ops/params.h"

namespace mb::cpu {

// Plain triple loop, one f32 accumulator per output, k in order.
void linear_ref(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out);
// Multithreaded over N, AVX2/FMA when available (portable lane-array fallback otherwise). p.bf16_products:
// with bf16 weights where bf16_products_enabled(), x is rounded to bf16 (more than 8 rows: gemm_bf16_products,
// gemm.h; fewer: the GEMV on the rounded x), so every path multiplies the same bf16 values.
// p.row_invariant: the GEMV for any number of rows (never the GEMM), whose sums for a row do not depend on
// the others; without it, up to 8 rows take the GEMV too (the same sums).
void linear_fast(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out, const ops::LinearParams& p = {});

// linear_gathered (ops/linear.h): row r through w[ids[r]] with linear_ref, one row at a time.
void linear_gathered_ref(const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out);
// Rows grouped by matrix: each matrix used is read once for all its rows (gather, linear_fast with p, scatter).
void linear_gathered_fast(const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out,
                          const ops::LinearParams& p = {});

}  // namespace mb::cpu
