// Simulator self-test kernels (compiled into the metal-sim build only; driven by tests/metal/).
// Each checks one MSL semantic the launcher must reproduce; the test_fault_* kernels are deliberately
// wrong and must be reported.
#include "kernel_common.h"

struct TestArgs {
  uint n;
  uint m;
};

// Barrier: thread i writes shared[i], waits, then reads its neighbour's slot.
// Without a working barrier the neighbour's slot still holds the NaN the sim fills it with.
kernel void test_barrier_rotate(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]],
                                MB_THREAD_POSITION) {
  MB_THREADGROUP(float, shared, [1024]);
  shared[lidx] = x[tid.x];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[tid.x] = shared[(lidx + 1) % tg_size.x];
}
MB_REGISTER_KERNEL(test_barrier_rotate)

// Every built-in position value of every thread: out[global linear thread][18].
kernel void test_thread_positions(DEVICE_PTR(uint) out [[buffer(0)]], MB_THREAD_POSITION) {
  const uint threads = tg_size.x * tg_size.y * tg_size.z;
  const uint group_linear = (tgid.z * tg_count.y + tgid.y) * tg_count.x + tgid.x;
  DEVICE_PTR(uint) row = out + (group_linear * threads + lidx) * 18;
  const uint3 v[5] = {tid, ltid, tgid, tg_size, tg_count};
  for (uint k = 0; k < 5; ++k) {
    row[3 * k + 0] = v[k].x;
    row[3 * k + 1] = v[k].y;
    row[3 * k + 2] = v[k].z;
  }
  row[15] = lidx;
  row[16] = simd_lane;
  row[17] = simd_group;
}
MB_REGISTER_KERNEL(test_thread_positions)

// Tree reduction in threadgroup memory (log2(group) barriers): y[group] = sum of the group's x.
// The group size must be a power of two.
kernel void test_barrier_tree_sum(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]],
                                  MB_THREAD_POSITION) {
  MB_THREADGROUP(float, partial, [1024]);
  partial[lidx] = x[tid.x];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint stride = tg_size.x / 2; stride > 0; stride /= 2) {
    if (lidx < stride) partial[lidx] += partial[lidx + stride];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (lidx == 0) y[tgid.x] = partial[0];
}
MB_REGISTER_KERNEL(test_barrier_tree_sum)

// Every simd_* function on one value per thread; row r of y ([12, n]) holds function r.
kernel void test_simd_functions(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]],
                                MB_THREAD_POSITION) {
  const uint n = tg_count.x * tg_size.x;
  const uint i = tid.x;
  const float v = x[i];
  y[0 * n + i] = simd_sum(v);
  y[1 * n + i] = simd_max(v);
  y[2 * n + i] = simd_min(v);
  y[3 * n + i] = simd_shuffle(v, ushort((simd_lane * 7 + 3) % 32));
  y[4 * n + i] = simd_shuffle_down(v, 3);
  y[5 * n + i] = simd_shuffle_up(v, 5);
  y[6 * n + i] = simd_shuffle_xor(v, 6);
  y[7 * n + i] = simd_broadcast(v, 9);
  y[8 * n + i] = simd_prefix_inclusive_sum(v);
  y[9 * n + i] = simd_prefix_exclusive_sum(v);
  const float2 pair = simd_sum(float2(v, 2.0f * v));  // vector values
  y[10 * n + i] = pair.y;
  y[11 * n + i] = float(simd_sum(uint(simd_lane)));    // integer values
}
MB_REGISTER_KERNEL(test_simd_functions)

// Active lanes only: threads with x < 0 return first; the others reduce among themselves.
// y: [3, n] (sum, inclusive prefix, exclusive prefix); returned threads leave their slots untouched.
kernel void test_simd_active_lanes(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]],
                                   MB_THREAD_POSITION) {
  const uint n = tg_count.x * tg_size.x;
  const float v = x[tid.x];
  if (v < 0.0f) return;
  y[0 * n + tid.x] = simd_sum(v);
  y[1 * n + tid.x] = simd_prefix_inclusive_sum(v);
  y[2 * n + tid.x] = simd_prefix_exclusive_sum(v);
}
MB_REGISTER_KERNEL(test_simd_active_lanes)

// d = a @ b + c with 8x8 simdgroup matrices, one simdgroup per 8x8 tile of d. A tiles go through
// threadgroup memory, B tiles load transposed straight from device memory (bt = B^T).
struct MatArgs {
  uint m;
  uint n;
  uint k;
};
kernel void test_simdgroup_mma(DEVICE_PTR(const float) a [[buffer(0)]],   // [m, k]
                               DEVICE_PTR(const float) bt [[buffer(1)]],  // [n, k]
                               DEVICE_PTR(const float) c [[buffer(2)]],   // [m, n]
                               DEVICE_PTR(float) d [[buffer(3)]],         // [m, n]
                               constant MatArgs& args [[buffer(4)]], MB_THREAD_POSITION) {
  MB_THREADGROUP(float, a_tile, [64]);
  const uint row0 = tgid.y * 8, col0 = tgid.x * 8;
  simdgroup_float8x8 acc;
  simdgroup_load(acc, c, args.n, ulong2(col0, row0));
  for (uint k0 = 0; k0 < args.k; k0 += 8) {
    for (uint e = simd_lane; e < 64; e += 32) a_tile[e] = a[(row0 + e / 8) * args.k + k0 + e % 8];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_float8x8 ma, mb;
    simdgroup_load(ma, a_tile, 8);
    simdgroup_load(mb, bt, args.k, ulong2(k0, col0), true);
    simdgroup_multiply_accumulate(acc, ma, mb, acc);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  simdgroup_store(acc, d, args.n, ulong2(col0, row0));
}
MB_REGISTER_KERNEL(test_simdgroup_mma)

// Threadgroup memory belongs to one group: each group counts its threads with a threadgroup atomic
// and checks that every slot of its `owner` array holds its own id. out: [groups, 2].
kernel void test_threadgroup_isolation(DEVICE_PTR(uint) out [[buffer(0)]], MB_THREAD_POSITION) {
  MB_THREADGROUP(atomic_uint, count, );
  MB_THREADGROUP(uint, owner, [1024]);
  if (lidx == 0) atomic_store_explicit(&count, 0u, memory_order_relaxed);
  owner[lidx] = tgid.x;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  atomic_fetch_add_explicit(&count, 1u, memory_order_relaxed);
  uint foreign = 0;
  for (uint j = 0; j < tg_size.x; ++j) foreign += owner[j] != tgid.x ? 1u : 0u;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lidx == 0) {
    out[2 * tgid.x] = atomic_load_explicit(&count, memory_order_relaxed);
    out[2 * tgid.x + 1] = foreign;
  }
}
MB_REGISTER_KERNEL(test_threadgroup_isolation)

// Device atomics from all groups at once: a histogram of x % m, the sum of x, and max / min of x.
kernel void test_device_atomics(DEVICE_PTR(const uint) x [[buffer(0)]], DEVICE_PTR(atomic_uint) bins [[buffer(1)]],
                                DEVICE_PTR(atomic_float) total [[buffer(2)]], DEVICE_PTR(atomic_int) extrema [[buffer(3)]],
                                constant TestArgs& args [[buffer(4)]], MB_THREAD_POSITION) {
  if (tid.x >= args.n) return;
  const uint v = x[tid.x];
  atomic_fetch_add_explicit(bins + (v % args.m), 1u, memory_order_relaxed);
  atomic_fetch_add_explicit(total, float(v), memory_order_relaxed);
  atomic_fetch_max_explicit(&extrema[0], int(v), memory_order_relaxed);
  atomic_fetch_min_explicit(extrema + 1, int(v), memory_order_relaxed);
}
MB_REGISTER_KERNEL(test_device_atomics)

// Vector types, constructors, swizzles, conversions and a few metal:: functions. y: [8] float4.
kernel void test_vector_types(DEVICE_PTR(const float4) x [[buffer(0)]], DEVICE_PTR(float4) y [[buffer(1)]],
                              MB_THREAD_POSITION) {
  if (tid.x != 0) return;
  const float4 v = x[0];
  y[0] = float4(v.xy, v.w, 1.0f);
  y[1] = v.wzyx;
  y[2] = float4(half4(v));
  y[3] = float4(2.5f);
  y[4] = select(v, -v, v < 0.0f);
  y[5] = float4(as_type<float>(as_type<uint>(v.x) ^ 0x80000000u), dot(v, v), precise::tanh(v.y), precise::exp(v.z));
  y[6] = float4(bfloat4(v));
  float4 w = v;
  w.yz = float2(7.0f, 8.0f);
  w[3] = fma(v.x, v.y, v.z);
  y[7] = w;
}
MB_REGISTER_KERNEL(test_vector_types)

// ---- Deliberately faulty kernels: the sim must report each one. ----

// Writes one element past the end of its output (the classic `<=` bug).
kernel void test_fault_write_past_end(DEVICE_PTR(float) y [[buffer(0)]], constant TestArgs& args [[buffer(1)]],
                                      MB_THREAD_POSITION) {
  if (tid.x <= args.n) y[tid.x] = 1.0f;
}
MB_REGISTER_KERNEL(test_fault_write_past_end)

// Reads one element before the start of its input.
kernel void test_fault_read_before_start(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]],
                                         constant TestArgs& args [[buffer(2)]], MB_THREAD_POSITION) {
  if (tid.x < args.n) y[tid.x] = x[int(tid.x) - 1];
}
MB_REGISTER_KERNEL(test_fault_read_before_start)

// Declares its input writable and writes it (bound read-only by the dispatch).
kernel void test_fault_write_input(DEVICE_PTR(float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]],
                                   constant TestArgs& args [[buffer(2)]], MB_THREAD_POSITION) {
  if (tid.x >= args.n) return;
  y[tid.x] = x[tid.x];
  if (tid.x == args.m) x[tid.x] = 0.0f;
}
MB_REGISTER_KERNEL(test_fault_write_input)

// Some threads return before a barrier the others wait at.
kernel void test_fault_barrier_after_return(DEVICE_PTR(float) y [[buffer(0)]], MB_THREAD_POSITION) {
  if (lidx == 3) return;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[tid.x] = 1.0f;
}
MB_REGISTER_KERNEL(test_fault_barrier_after_return)

// Asks for more threadgroup memory than an Apple GPU has (64 KiB > 32 KiB).
kernel void test_fault_threadgroup_too_large(DEVICE_PTR(float) y [[buffer(0)]], MB_THREAD_POSITION) {
  MB_THREADGROUP(float, big, [16384]);
  big[lidx] = 1.0f;
  y[tid.x] = big[lidx];
}
MB_REGISTER_KERNEL(test_fault_threadgroup_too_large)

// Reads a float4 at a 4-byte offset: misaligned for a 16-byte vector load.
kernel void test_fault_misaligned_vector(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float4) y [[buffer(1)]],
                                         MB_THREAD_POSITION) {
  if (tid.x != 0) return;
  y[0] = ((DEVICE_PTR(const float4))(x + 4))[0];  // aligned: fine
  y[1] = ((DEVICE_PTR(const float4))(x + 1))[0];  // misaligned
}
MB_REGISTER_KERNEL(test_fault_misaligned_vector)
