// Metal-backend dispatch for ops/linear.h (kernels: metal/linear.metal). Arguments are validated by
// the front door; this picks the kernel variant, the grid and binds the buffers.
#pragma once
#include "backend/metal/launcher.h"
#include "core/tensor.h"

namespace mb::metal {

// Kernel variant for x with M rows (after flattening the leading dimensions):
//   M <= kLinearMatvecMaxM or row_invariant: matvec (decode; more than 4 rows as slabs of 4, one grid row
//   each, so a row's sums do not depend on the others); otherwise simdmm (simdgroup_matrix tiles), or the
//   portable tiled kernel when the environment variable MARKBASE_METAL_LINEAR=portable (GPUs without
//   simdgroup_matrix, and the tests of that path). MARKBASE_METAL_LINEAR=simdgroup or unset: simdmm.
constexpr int64_t kLinearMatvecMaxM = 4;
const char* linear_variant(int64_t M, bool row_invariant = false);

// x: [M, K] (any leading dims), w: [N, K], bias: [N] or nullptr, out: [M, N] in x's dtype.
void linear(KernelLauncher& L, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out,
            bool row_invariant = false);

// x: [R, K] f32, w: [E, N, K], ids: [R] i32, out: [R, N] f32: a matvec per row (decode-sized R).
void linear_gathered(KernelLauncher& L, const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out);

}  // namespace mb::metal
