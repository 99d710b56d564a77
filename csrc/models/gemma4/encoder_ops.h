// Op sequences the Gemma 4 encoders (vision tower, audio tower) share.
#pragma once
#include "core/tensor.h"
#include "models/gemma4/weights.h"
#include "ops/exec.h"

namespace mb::gemma4 {

// y = clamp(clamp(x, in_min, in_max) · Wᵀ, out_min, out_max) (spec §9.24: both clamps, the checkpoint's
// scalars; an infinite bound is skipped). `scratch` (x's shape) holds the clamped input.
void clippable_linear(const Exec& ex, const ClippableLinear& l, Tensor& scratch, const Tensor& x, Tensor& out);

// The same linear over rows [begin, end) of W (a contiguous slice of the output features), clamps included.
ClippableLinear output_rows(const ClippableLinear& l, int64_t begin, int64_t end);

}  // namespace mb::gemma4
