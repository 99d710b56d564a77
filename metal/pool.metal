// Index-mapped average pooling (ops/pool.h): out[m] = (Σ_{n : index[n] == m} x[n]) / divisor, the rows
// added in increasing n from 0, then one division — the order of the CPU reference, so the result is
// bit-identical to it (csrc/backend/cpu/pool.cpp). Two passes (dispatch: csrc/backend/metal/pool_dispatch.cpp):
//
//  1. avg_pool_indexed_plan_i32 — ONE threadgroup builds the member lists (a stable counting sort):
//     start[m] .. start[m+1] index members[], which holds the rows n with index[n] == m in increasing n.
//     The index list is walked in chunks of T (threads per group) entries held in threadgroup memory;
//     each thread ranks its entry among the equal earlier entries of the chunk (T comparisons), so no
//     atomics and no ordering races: a bucket's count / cursor is updated only by the thread holding its
//     last entry in the chunk. Cost ~2·N·T comparisons: microseconds for the vision pooler (N = 2520).
//  2. avg_pool_indexed_sum_f32 — one threadgroup per output row m, one thread per column d: sums the
//     member rows in list order (neighbouring threads read neighbouring floats of a row).
#include "kernel_common.h"
#include "kernel_args.h"

// Rank of entry l among the chunk's entries [0, len) with the same bucket: earlier ones (-> its slot in
// the chunk's part of the bucket) and whether it is the last one (-> it carries the bucket's update).
inline void chunk_rank(threadgroup const int* chunk, uint len, uint l, thread uint& earlier, thread bool& last) {
  const int m = chunk[l];
  earlier = 0;
  last = true;
  for (uint k = 0; k < len; ++k) {
    if (chunk[k] != m) continue;
    if (k < l) ++earlier;
    if (k > l) last = false;
  }
}

// Bytes per call (N rows, M outputs): reads 2·N·4 (index, twice) + M·4 (cursor); writes (M+1)·4 (start,
// twice), M·4 (cursor, twice), N'·4 (members; N' = rows that are not skipped).
// buffers: index [N] i32, start [M+1] u32, cursor [M] u32 (scratch), members [>= N'] u32.
kernel void avg_pool_indexed_plan_i32(DEVICE_PTR(const int) index [[buffer(0)]], DEVICE_PTR(uint) start [[buffer(1)]],
                                      DEVICE_PTR(uint) cursor [[buffer(2)]], DEVICE_PTR(uint) members [[buffer(3)]],
                                      constant AvgPoolPlanArgs& args [[buffer(4)]], MB_THREAD_POSITION) {
  MB_THREADGROUP(int, chunk, [kPoolPlanMaxThreads]);
  MB_THREADGROUP(uint, simd_totals, [kPoolPlanMaxThreads / 32]);
  const uint T = tg_size.x, N = args.n, M = args.num_out;

  // 1. start[0] = 0, start[m + 1] = |bucket m|; cursor[m] = 0.
  for (uint m = lidx; m <= M; m += T) start[m] = 0;
  for (uint m = lidx; m < M; m += T) cursor[m] = 0;
  for (uint n0 = 0; n0 < N; n0 += T) {
    const uint len = min(T, N - n0);
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    if (lidx < len) chunk[lidx] = index[n0 + lidx];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (lidx < len && chunk[lidx] >= 0) {
      uint earlier;
      bool last;
      chunk_rank(chunk, len, lidx, earlier, last);
      if (last) start[uint(chunk[lidx]) + 1] += earlier + 1;  // one writer per bucket and chunk
    }
  }
  threadgroup_barrier(mem_flags::mem_device);

  // 2. Inclusive prefix sum of start[1 .. M] in place (then start[m] = first slot of bucket m). Thread l
  //    owns the segment [l·S, l·S + S) of buckets: its serial total, an exclusive scan of the totals over
  //    the group (simd prefix sums, then over the simdgroups' totals), then its segment's running sums.
  const uint S = (M + T - 1) / T;
  const uint m_lo = min(lidx * S, M), m_hi = min(m_lo + S, M);
  uint total = 0;
  for (uint m = m_lo; m < m_hi; ++m) total += start[m + 1];
  const uint in_simd = simd_prefix_exclusive_sum(total);
  if (simd_lane == 31 || lidx == T - 1) simd_totals[simd_group] = in_simd + total;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  uint offset = in_simd;
  for (uint g = 0; g < simd_group; ++g) offset += simd_totals[g];
  for (uint m = m_lo; m < m_hi; ++m) {
    offset += start[m + 1];
    start[m + 1] = offset;
  }

  // 3. Stable fill: members[start[m] + cursor[m] + rank] = n, chunk by chunk in increasing n.
  for (uint n0 = 0; n0 < N; n0 += T) {
    const uint len = min(T, N - n0);
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    if (lidx < len) chunk[lidx] = index[n0 + lidx];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint earlier = 0;
    bool last = false;
    const bool member = lidx < len && chunk[lidx] >= 0;
    if (member) {
      const uint m = uint(chunk[lidx]);
      chunk_rank(chunk, len, lidx, earlier, last);
      members[start[m] + cursor[m] + earlier] = n0 + lidx;
    }
    threadgroup_barrier(mem_flags::mem_device);  // every cursor read above happens before the update
    if (member && last) cursor[uint(chunk[lidx])] += earlier + 1;
  }
}

// Bytes per call (N' member rows, D columns, M outputs): reads N'·D·4 (x rows, each once) + the lists
// (M+1 + N')·4 per column block; writes M·D·4 (out).
// buffers: x [N, D] f32, start [M+1] u32, members [N'] u32, out [M, D] f32.
// Grid: (M, ceil(D / T)); one thread per column d of output row m.
kernel void avg_pool_indexed_sum_f32(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(const uint) start [[buffer(1)]],
                                     DEVICE_PTR(const uint) members [[buffer(2)]], DEVICE_PTR(float) out [[buffer(3)]],
                                     constant AvgPoolSumArgs& args [[buffer(4)]], MB_THREAD_POSITION) {
  const uint m = tgid.x, d = tgid.y * tg_size.x + lidx, D = args.d;
  if (d >= D) return;
  float acc = 0.0f;
  const uint k1 = start[m + 1];
  for (uint k = start[m]; k < k1; ++k) acc += x[members[k] * D + d];
  out[m * D + d] = acc / args.divisor;
}
MB_REGISTER_KERNEL(avg_pool_indexed_plan_i32)
MB_REGISTER_KERNEL(avg_pool_indexed_sum_f32)
