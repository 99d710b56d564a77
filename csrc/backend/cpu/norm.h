// CPU kernels for ops/norm.h. Arguments are validated by the front door; absent weight / bias are
// undefined Tensors.
#pragma once
#include "core/tensor.h"

namespace mb::cpu {

void rms_norm_ref(const Tensor& x, const Tensor& weight, float eps, Tensor& out);
void rms_norm_fast(const Tensor& x, const Tensor& weight, float eps, Tensor& out);
void layer_norm_ref(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out);
void layer_norm_fast(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out);

}  // namespace mb::cpu
