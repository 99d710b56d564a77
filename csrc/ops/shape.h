// Materialising shape ops: copy a (strided) view into contiguous memory, with dtype conversion, and
// concatenate tensors along one dimension. The views themselves (reshape, slice, select, transpose,
// permute) live on Tensor and cost nothing.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "ops/exec.h"

namespace mb::ops {

// out = src elementwise. src: any strides; out: contiguous, src's shape. Same dtype copies bytes exactly
// (any plain dtype); between f32 / bf16 / f16 values convert with round to nearest even.
void copy(const Tensor& src, Tensor& out, const Exec& ex = {});

// out = the tensors joined along `dim` (negative counts from the end). All tensors share one dtype
// (out's) and rank, and agree on every dimension but `dim`; any strides. out: contiguous.
void concat(const std::vector<Tensor>& tensors, int64_t dim, Tensor& out, const Exec& ex = {});

}  // namespace mb::ops
