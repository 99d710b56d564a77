// CPU kernels for ops/conv.h. Arguments are validated by the front door.
#pragma once
#include "core/tensor.h"
#include "ops/params.h"

namespace mb::cpu {

// bias may be undefined (no bias).
void conv2d_ref(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, const ops::Conv2dParams& p);
void conv2d_fast(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, const ops::Conv2dParams& p);
void depthwise_conv1d_causal_ref(const Tensor& x, const Tensor& w, Tensor& out);
void depthwise_conv1d_causal_fast(const Tensor& x, const Tensor& w, Tensor& out);

}  // namespace mb::cpu
