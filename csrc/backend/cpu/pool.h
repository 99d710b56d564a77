// CPU kernels for ops/pool.h. Arguments (including every index) are validated by the front door.
#pragma once
#include "core/tensor.h"

namespace mb::cpu {

void avg_pool_indexed_ref(const Tensor& x, const Tensor& index, Tensor& out, float divisor);
void avg_pool_indexed_fast(const Tensor& x, const Tensor& index, Tensor& out, float divisor);

}  // namespace mb::cpu
