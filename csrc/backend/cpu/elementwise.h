// CPU kernels for ops/elementwise.h. Arguments are validated by the front door.
#pragma once
#include "core/tensor.h"
#include "ops/params.h"

namespace mb::cpu {

void unary_ref(const Tensor& x, Tensor& out, const ops::UnaryParams& p);
void unary_fast(const Tensor& x, Tensor& out, const ops::UnaryParams& p);
void binary_ref(const Tensor& a, const Tensor& b, Tensor& out, ops::BinaryKind k);
void binary_fast(const Tensor& a, const Tensor& b, Tensor& out, ops::BinaryKind k);

// Scalar definitions shared by the reference and fast kernels (f32, as the reference model does).
inline float gelu_tanh_f(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.f + std::tanh(k * (x + 0.044715f * x * x * x)));
}
inline float sigmoid_f(float x) { return 1.f / (1.f + std::exp(-x)); }
inline float silu_f(float x) { return x / (1.f + std::exp(-x)); }
// torch.nn.functional.softplus(beta=1, threshold=20)
inline float softplus_f(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }

}  // namespace mb::cpu
