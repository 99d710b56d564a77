// CPU kernels for ops/linear.h. Arguments are validated by the front door.
#pragma once
#include "core/tensor.h"

namespace mb::cpu {

// Plain triple loop, one f32 accumulator per output, k in order.
void linear_ref(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out);
// Multithreaded over N, AVX2/FMA when available (portable lane-array fallback otherwise).
void linear_fast(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out);

// linear_gathered (ops/linear.h): row r through w[ids[r]] with linear_ref, one row at a time.
void linear_gathered_ref(const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out);
// Rows grouped by matrix: each matrix used is read once for all its rows (gather, linear_fast, scatter).
void linear_gathered_fast(const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out);

}  // namespace mb::cpu
