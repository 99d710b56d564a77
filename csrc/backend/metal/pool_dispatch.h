// Metal-backend dispatch for ops/pool.h (kernels: metal/pool.metal). Arguments are validated by the
// front door (every index in [-1, num_out)); this picks the grids and binds the buffers.
#pragma once
#include "backend/metal/launcher.h"
#include "core/tensor.h"

namespace mb::metal {

// Two dispatches (member lists, then sums) through scratch buffers the bindings keep alive.
void avg_pool_indexed(KernelLauncher& L, const Tensor& x, const Tensor& index, float divisor, Tensor& out);

}  // namespace mb::metal
