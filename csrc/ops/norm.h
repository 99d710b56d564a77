// Normalisations over the last dimension: RMSNorm (Gemma 4, spec §2.1) and LayerNorm (as
// torch.nn.functional.layer_norm). Storage f32, bf16 or f16; output dtype = x dtype; math in f32.
#pragma once
#include "core/tensor.h"
#include "ops/exec.h"

namespace mb::ops {

// out = x · (mean(x²) + eps)^-0.5 · w, per row of the last dimension. Plain w, NOT (1 + w).
//   x: [..., D] contiguous; weight: [D] f32/bf16/f16 or an undefined Tensor (no scale); out: like x.
// out may be x itself (exact in-place) but not partially overlap it or overlap weight.
void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out, const Exec& ex = {});

// out = (x − mean) / sqrt(var + eps) · w + b with the biased variance (divide by D), per row.
//   x: [..., D] contiguous; weight, bias: [D] or undefined (each optional; when both are given they
//   share one dtype); out: like x. Exact in-place allowed.
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                const Exec& ex = {});

}  // namespace mb::ops
