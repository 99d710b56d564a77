// Top-k kernel (ops/topk.h): per row of x [R, N] f32, the k first elements in topk order, values
// [R, k] f32 and indices [R, k] i32. The order is torch.topk's (as cpu::topk_before): NaN above every
// number, then larger values first, equal values (-0 == +0) and NaNs by lower index first. Selection
// does no arithmetic, so the result equals the CPU backend's exactly (values are copied bit for bit).
//
// One threadgroup of kTopkThreads threads per row. Each element gets a 32-bit sort key (larger key =
// earlier; equal keys exactly when the values tie), and the row is output in batches of at most
// kTopkBatch elements, each batch being the best elements still after the last one output:
//   1. threshold: if more than kTopkBatch elements remain, a radix select (4 passes of 8-bit digits,
//      threadgroup-atomic histograms of the remaining keys) finds the key thr of the batch's last
//      element and how many elements with key == thr belong to the batch (the lowest-index ones);
//   2. collect: one ordered pass over the row (chunks of kTopkThreads elements, positions from a
//      threadgroup prefix sum) copies the batch's (key, index) pairs into threadgroup memory (all
//      remaining elements when at most kTopkBatch remain);
//   3. sort them with a bitonic sort in threadgroup memory and write the first `batch` out.
// For k <= kTopkBatch (routing, sampling) this is one batch: 5 reads of the row (1 if N <= kTopkBatch).
//
// Bytes per call (R rows of N elements, plus 12 bytes of args): reads R*N*4*(5 per batch of a row with
// N > kTopkBatch, 1 otherwise; batches = ceil(k / kTopkBatch)) + R*k*4 (the selected values again),
// writes R*k*4 (values) + R*k*4 (indices).
#include "kernel_common.h"
#include "kernel_args.h"

static constant constexpr uint kTopkThreads = 256;  // threads per row (must match topk_dispatch.cpp); one per radix digit
static constant constexpr uint kTopkSimdgroups = kTopkThreads / 32;
static constant constexpr uint kTopkBatch = 1024;  // elements sorted at once in threadgroup memory (a power of two)
static constant constexpr uint kTopkNoKey = 0u;  // below every element's key: pads the bitonic sort

// Sort key, larger first: NaN -> 0xFFFFFFFF; numbers map monotonically (with -0 as +0) to
// [0x007FFFFF (-inf), 0xFF800000 (+inf)], so no element's key is kTopkNoKey.
inline uint topk_key(float v) {
  if (isnan(v)) return 0xFFFFFFFFu;
  const uint bits = as_type<uint>(v == 0.0f ? 0.0f : v);
  return (bits & 0x80000000u) != 0u ? ~bits : (bits | 0x80000000u);
}

// (key a at index ia) comes before (key b at index ib).
inline bool topk_before(uint ka, uint ia, uint kb, uint ib) { return ka != kb ? ka > kb : ia < ib; }

// Exclusive prefix sum of v over the threads of the group in index order; `total` gets the sum over
// all threads. Every thread of the group must call it (it contains barriers).
inline uint group_exclusive_sum(uint v, threadgroup uint* sg_sums, uint simd_lane, uint simd_group, thread uint& total) {
  const uint incl = simd_prefix_inclusive_sum(v);
  if (simd_lane == 31u) sg_sums[simd_group] = incl;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  uint before = 0u, all = 0u;
  for (uint s = 0; s < kTopkSimdgroups; ++s) {
    const uint c = sg_sums[s];
    if (s < simd_group) before += c;
    all += c;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);  // sg_sums is rewritten by the next call
  total = all;
  return before + incl - v;
}

// Threadgroup scratch: cand_key / cand_idx [kTopkBatch] (the batch being sorted), hist [256] (radix
// histogram), sg_sums [kTopkSimdgroups] (prefix sums), digit [2] (the radix digit found and the count
// still wanted inside it).
inline void topk_row(DEVICE_PTR(const float) x, DEVICE_PTR(float) values, DEVICE_PTR(int) indices,
                     constant TopkArgs& args, uint r, uint lidx, uint simd_lane, uint simd_group,
                     threadgroup uint* cand_key, threadgroup uint* cand_idx, threadgroup atomic_uint* hist,
                     threadgroup uint* sg_sums, threadgroup uint* digit) {
  const uint N = args.N, k = args.k;
  const ulong row = ulong(r) * N, orow = ulong(r) * k;
  // The last element output so far: candidates are the elements after it in topk order.
  bool have_last = false;
  uint last_key = 0u, last_idx = 0u;
  for (uint produced = 0; produced < k;) {
    const uint remaining = N - produced;
    const uint batch = min(kTopkBatch, k - produced);
    // The batch is every candidate with key > thr plus the eq_take lowest-index ones with key == thr.
    uint thr = kTopkNoKey, eq_take = 0u, n_cand = remaining;
    if (remaining > kTopkBatch) {
      // Radix select of the batch-th candidate's key, 8 bits at a time from the top.
      n_cand = batch;
      uint prefix = 0u, mask = 0u, want = batch;
      for (int shift = 24; shift >= 0; shift -= 8) {
        for (uint b = lidx; b < 256u; b += kTopkThreads) atomic_store_explicit(&hist[b], 0u, memory_order_relaxed);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint i = lidx; i < N; i += kTopkThreads) {
          const uint key = topk_key(x[row + i]);
          const bool cand = !have_last || key < last_key || (key == last_key && i > last_idx);
          if (cand && (key & mask) == prefix)
            atomic_fetch_add_explicit(&hist[(key >> uint(shift)) & 0xFFu], 1u, memory_order_relaxed);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        // Thread l owns digit 255 - l: the prefix sum counts the candidates in higher digits.
        const uint d = 255u - lidx;
        const uint c = atomic_load_explicit(&hist[d], memory_order_relaxed);
        uint total;
        const uint above = group_exclusive_sum(c, sg_sums, simd_lane, simd_group, total);
        if (above < want && above + c >= want) {  // exactly one thread: the digit holding the want-th
          digit[0] = d;
          digit[1] = want - above;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        prefix |= digit[0] << uint(shift);
        mask |= 0xFFu << uint(shift);
        want = digit[1];
        // (digit is next written after the barriers of the next pass, once every thread read it.)
      }
      thr = prefix;
      eq_take = want;
    }

    // Collect the batch in index order (ties at thr must be the lowest indices).
    const uint gt_slots = n_cand - eq_take;
    uint gt_base = 0u, eq_base = 0u;
    for (uint base = 0; base < N; base += kTopkThreads) {
      const uint i = base + lidx;
      uint key = kTopkNoKey;
      bool gt = false, eq = false;
      if (i < N) {
        key = topk_key(x[row + i]);
        const bool cand = !have_last || key < last_key || (key == last_key && i > last_idx);
        gt = cand && key > thr;
        eq = cand && key == thr && eq_take > 0u;
      }
      uint total;  // counts packed: > thr in the low 16 bits, == thr in the high 16 (a chunk counts <= 256)
      const uint pos = group_exclusive_sum((gt ? 1u : 0u) | (eq ? 0x10000u : 0u), sg_sums, simd_lane, simd_group, total);
      const uint gpos = gt_base + (pos & 0xFFFFu), epos = eq_base + (pos >> 16);
      if (gt && gpos < gt_slots) {
        cand_key[gpos] = key;
        cand_idx[gpos] = i;
      }
      if (eq && epos < eq_take) {
        cand_key[gt_slots + epos] = key;
        cand_idx[gt_slots + epos] = i;
      }
      gt_base += total & 0xFFFFu;
      eq_base += total >> 16;
      if (gt_base >= gt_slots && eq_base >= eq_take) break;  // uniform: every thread has the same totals
    }

    // Bitonic sort of cand[0, P) into topk order, P = n_cand rounded up to a power of two.
    uint P = 1u;
    while (P < n_cand) P <<= 1;
    for (uint j = n_cand + lidx; j < P; j += kTopkThreads) {
      cand_key[j] = kTopkNoKey;
      cand_idx[j] = 0xFFFFFFFFu;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint size = 2u; size <= P; size <<= 1) {
      for (uint stride = size >> 1; stride > 0u; stride >>= 1) {
        for (uint t = lidx; t < P / 2u; t += kTopkThreads) {
          const uint i = ((t & ~(stride - 1u)) << 1) | (t & (stride - 1u)), j = i + stride;
          const uint ki = cand_key[i], ii = cand_idx[i], kj = cand_key[j], ij = cand_idx[j];
          // Blocks with (i & size) == 0 sort into topk order, the others into reverse order.
          const bool swap = (i & size) == 0u ? topk_before(kj, ij, ki, ii) : topk_before(ki, ii, kj, ij);
          if (swap) {
            cand_key[i] = kj;
            cand_idx[i] = ij;
            cand_key[j] = ki;
            cand_idx[j] = ii;
          }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
      }
    }

    for (uint j = lidx; j < batch; j += kTopkThreads) {
      const uint idx = cand_idx[j];
      values[orow + produced + j] = x[row + idx];  // the element itself: NaN payloads and -0 kept
      indices[orow + produced + j] = int(idx);
    }
    last_key = cand_key[batch - 1u];
    last_idx = cand_idx[batch - 1u];
    have_last = true;
    produced += batch;
    threadgroup_barrier(mem_flags::mem_threadgroup);  // cand is rewritten by the next batch
  }
}

kernel void topk_select_f32(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) values [[buffer(1)]],
                            DEVICE_PTR(int) indices [[buffer(2)]], constant TopkArgs& args [[buffer(3)]],
                            MB_THREAD_POSITION) {
  MB_THREADGROUP(uint, cand_key, [kTopkBatch]);
  MB_THREADGROUP(uint, cand_idx, [kTopkBatch]);
  MB_THREADGROUP(atomic_uint, hist, [256]);
  MB_THREADGROUP(uint, sg_sums, [kTopkSimdgroups]);
  MB_THREADGROUP(uint, digit, [2]);
  if (tgid.x >= args.R) return;  // the whole group (the grid is exactly R groups)
  topk_row(x, values, indices, args, tgid.x, lidx, simd_lane, simd_group, cand_key, cand_idx, hist, sg_sums, digit);
}
MB_REGISTER_KERNEL(topk_select_f32)
