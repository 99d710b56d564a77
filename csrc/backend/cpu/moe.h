// CPU kernels for ops/moe.h. Arguments are validated by the front door. Both variants of each op do
// the same f32 operations in the same order, so they agree bit for bit.
#pragma once
#include "core/tensor.h"

namespace mb::cpu {

void route_weights_ref(const Tensor& w, const Tensor& ids, const Tensor& scale, Tensor& out_w, Tensor& out_ids);
// Rows over the thread pool.
void route_weights_fast(const Tensor& w, const Tensor& ids, const Tensor& scale, Tensor& out_w, Tensor& out_ids);

void index_add_ref(Tensor& out, const Tensor& index, const Tensor& src, const Tensor* weight);
// Column blocks over the thread pool (each block walks the rows in index order).
void index_add_fast(Tensor& out, const Tensor& index, const Tensor& src, const Tensor* weight);

}  // namespace mb::cpu
