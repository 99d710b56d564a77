// CPU kernels for ops/linear.h. Arguments are validated by the front door.
#pragma once
#include "core/tensor.h"

namespace mb::cpu {

// Plain triple loop, one f32 accumulator per output, k in order.
void linear_ref(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out);
// Multithreaded over N, AVX2/FMA when available (portable lane-array fallback otherwise).
void linear_fast(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out);

}  // namespace mb::cpu
