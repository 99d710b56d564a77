// Convolutions: 2-D convolution (audio subsampling: 3×3, stride 2, padding 1) and the depthwise causal
// 1-D convolution of the conformer's light-conv block. Activations f32; weights f32 / bf16 / f16;
// math and accumulation always f32.
#pragma once
#include "core/tensor.h"
#include "ops/exec.h"
#include "ops/params.h"

namespace mb::ops {

// Output extent of one spatial dimension, as torch: floor((n + 2·pad − k) / stride) + 1.
int64_t conv_out_size(int64_t n, int64_t k, int64_t stride, int64_t pad);

// out[b, co, oh, ow] = bias[co] + Σ_{ci, i, j} w[co, ci, i, j] · x[b, ci, oh·sh − ph + i, ow·sw − pw + j]
// (taps outside the input read zero), as torch.nn.functional.conv2d.
//   x: [B, Cin, H, W] f32; w: [Cout, Cin, kh, kw] f32/bf16/f16; bias: [Cout] f32/bf16/f16 or undefined;
//   out: [B, Cout, Ho, Wo] f32.
void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, const Conv2dParams& p,
            const Exec& ex = {});

// Depthwise causal conv over time: out[t, c] = Σ_{j=0..K−1} w[c, 0, j] · x[t − (K−1) + j, c], with x = 0
// for negative time (left padding K−1). No bias.
//   x: [T, C] f32; w: [C, 1, K] f32/bf16/f16 (torch's Conv1d(groups=C) layout); out: [T, C] f32.
void depthwise_conv1d_causal(const Tensor& x, const Tensor& w, Tensor& out, const Exec& ex = {});

}  // namespace mb::ops
