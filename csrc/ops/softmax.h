// Softmax over the last dimension. Storage f32, bf16 or f16; output dtype = x dtype; math in f32.
#pragma once
#include "core/tensor.h"
#include "ops/exec.h"

namespace mb::ops {

// out[r, i] = e^(x[r, i] − max_r) / Σ_j e^(x[r, j] − max_r), for x: [..., D] contiguous (D ≥ 1).
// Special rows (documented behaviour, never a silent NaN):
//   * every entry −inf (a fully masked row) → all zeros;
//   * any NaN → the whole row is NaN (NaN propagates);
//   * some +inf (and no NaN) → NaN, as torch (inf − inf).
// out may be x itself (exact in-place).
void softmax(const Tensor& x, Tensor& out, const Exec& ex = {});

}  // namespace mb::ops
