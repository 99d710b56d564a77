// Threadgroup-wide reductions of the row kernels of this family (norm.metal, softmax.metal).
// Convention: the threadgroup has a multiple of 32 threads (so every simdgroup is full and every
// thread reaches every simd_* call and barrier) and at most 1024 (at most 32 simdgroups).
// `partial` is threadgroup scratch of 32 floats, declared by the kernel with MB_THREADGROUP.
#pragma once
#include "kernel_common.h"

// Helpers live in a namespace: every .metal file is its own translation unit in the sim, and two files
// defining the same inline helper differently would silently break the one-definition rule.
namespace norm_family {

// Σ v over the threadgroup; every thread gets the same value. Each simdgroup sums in hardware, lane 0
// parks the partial, then every simdgroup re-reduces the ≤ 32 partials itself (same inputs, same
// order: identical totals everywhere, no broadcast step). The last barrier frees `partial` for reuse.
// A one-simdgroup group (rows of ≤ 128 columns) has its total after the first sum: no scratch, no barriers.
inline float threadgroup_sum(float v, threadgroup float* partial, uint simd_lane, uint simd_group, uint num_simdgroups) {
  v = simd_sum(v);
  if (num_simdgroups == 1) return v;  // uniform across the group
  if (simd_lane == 0) partial[simd_group] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float total = simd_lane < num_simdgroups ? partial[simd_lane] : 0.0f;
  total = simd_sum(total);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return total;
}

// max v over the threadgroup (callers never pass NaN: metal::max would drop it). Threads without
// elements pass −inf.
inline float threadgroup_max(float v, threadgroup float* partial, uint simd_lane, uint simd_group, uint num_simdgroups) {
  v = simd_max(v);
  if (num_simdgroups == 1) return v;  // as threadgroup_sum
  if (simd_lane == 0) partial[simd_group] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float m = simd_lane < num_simdgroups ? partial[simd_lane] : -INFINITY;
  m = simd_max(m);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return m;
}

}  // namespace norm_family
