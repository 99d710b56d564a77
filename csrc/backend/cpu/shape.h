// CPU kernels for ops/shape.h. Arguments are validated by the front door.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace mb::cpu {

// Reference: mb::copy_into (one scalar strided walk).
void copy_ref(const Tensor& src, Tensor& dst);
// Same contract with any dst strides (concat writes through slices of out); parallel for large tensors.
void copy_fast(const Tensor& src, Tensor& dst);
// dim is already normalised to [0, rank).
void concat_ref(const std::vector<Tensor>& tensors, int64_t dim, Tensor& out);
void concat_fast(const std::vector<Tensor>& tensors, int64_t dim, Tensor& out);

}  // namespace mb::cpu
