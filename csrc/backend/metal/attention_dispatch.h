// Metal-backend dispatch for ops/attention.h (kernels: metal/attention.metal). Arguments are validated
// by the front door; this picks the kernels, sizes the grids and binds the buffers.
#pragma once
#include "backend/metal/launcher.h"
#include "core/tensor.h"
#include "ops/params.h"

namespace mb::metal {

// Encodes the attention dispatches (decode + merge, or prefill); the bindings keep its scratch alive.
// Scratch (decode with the key axis split in C > 1 chunks): f32 [T, Hq, C, d + 3], one
// (seen, max, sum, acc[d]) partial per (query, head, chunk); C <= 64 chunks of >= 128 keys.
// DeviceError for head dims above 512 or sizes beyond the kernels' 32-bit indexing.
void attention(KernelLauncher& L, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos,
                 const Tensor& k_pos, const Tensor* q_block, const Tensor* k_block, Tensor& out,
                 const ops::AttentionParams& p);

// ops::local_attention: one kernel (local_attention_f32). DeviceError for windows above 64 keys or sizes
// beyond the kernel's 32-bit indexing.
void local_attention(KernelLauncher& L, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& rel,
                     float softcap, Tensor& out);

}  // namespace mb::metal
