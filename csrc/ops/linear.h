// Dense linear layer: out = x · wᵀ + bias, the hot op of the engine (every projection and the logits).
#pragma once
#include "core/tensor.h"
#include "ops/exec.h"
#include "ops/params.h"

namespace mb::ops {

// What ex lets the linear kernels do and asks them to keep (ops/params.h): bf16_products, row_invariant.
LinearParams linear_params(const Exec& ex);

// x: [..., K] f32 or bf16, contiguous
// w: [N, K] f32, bf16 or f16, contiguous (typically a read-only view into a mapped checkpoint)
// bias: [N] f32 / bf16 / f16, or nullptr
// out: [..., N], x's dtype, contiguous, must not overlap any input.
// Products are accumulated in f32 (whatever the storage), the bias is added to the f32 sum, and the
// result is rounded once to out's dtype.
void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out, const Exec& ex = {});

// Each row through its own matrix (MoE experts chosen on the device): out[r] = x[r] · w[ids[r]]ᵀ.
// x: [R, K] f32 contiguous; w: [E, N, K] f32 / bf16 / f16 contiguous (every expert's matrix);
// ids: [R] i32 contiguous, each in [0, E); out: [R, N] f32 contiguous, no overlap with any input.
// Products and accumulation as linear() with ex (bf16_products and row_invariant included: a row comes out
// as linear() of its matrix gives it, so gathered and grouped MoE experts agree). ids are range-checked on
// the host, except on a deferred backend (Backend::deferred(): Metal), whose ids may still be in flight:
// its kernel writes a zero row for an out-of-range id instead of reading outside w.
void linear_gathered(const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out, const Exec& ex = {});

}  // namespace mb::ops
