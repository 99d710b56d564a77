// CPU kernels for ops/rope.h. Arguments are validated by the front door.
#pragma once
#include "core/tensor.h"

namespace mb::cpu {

// x: [T, H, d] (last dim contiguous); positions: [T] i32 / i64; inv_freq: [n] f32; out: [T, H, d].
void rope_ref(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& out);
void rope_fast(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& out);
// x: [N, H, d]; positions: [N, 2] i32 / i64 (x, y); inv: d/4 frequencies; out: [N, H, d].
void rope_2d_ref(const Tensor& x, const Tensor& positions, const float* inv, Tensor& out);
void rope_2d_fast(const Tensor& x, const Tensor& positions, const float* inv, Tensor& out);

}  // namespace mb::cpu
