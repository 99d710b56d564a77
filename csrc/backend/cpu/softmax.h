// CPU kernels for ops/softmax.h. Arguments are validated by the front door.
#pragma once
#include "core/tensor.h"

namespace mb::cpu {

void softmax_ref(const Tensor& x, Tensor& out);
void softmax_fast(const Tensor& x, Tensor& out);

}  // namespace mb::cpu
