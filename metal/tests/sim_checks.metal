// Planted bugs for metal-sim's full checks (MARKBASE_SIM_CHECKS=full; sim build only; driven by
// tests/metal/test_sim_checks.py). Each test_check_* kernel breaks one GPU rule that a CPU run hides;
// the test_ok_* kernels are the correct versions, which must pass.
#include "kernel_common.h"

// Race: thread i writes slot i and reads slot i - 1 with no barrier between. The fibers run in index
// order, so without the checks the sim always reads the neighbour's new value; a GPU may read either.
kernel void test_check_race(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]],
                            MB_THREAD_POSITION) {
  MB_THREADGROUP(float, slots, [256]);
  slots[lidx] = x[tid.x];  // @race-write
  y[tid.x] = lidx > 0 ? slots[lidx - 1] : 0.0f;  // @race-read
}
MB_REGISTER_KERNEL(test_check_race)

// Missing barrier: a tree reduction whose barrier inside the loop is gone (`barrier` = 0), or kept
// with flags that do not order threadgroup memory (`barrier` = 1: mem_device), or correct (2).
struct CheckArgs {
  uint mode;
  uint n;
};
kernel void test_check_tree_sum(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]],
                                constant CheckArgs& args [[buffer(2)]], MB_THREAD_POSITION) {
  MB_THREADGROUP(float, partial, [256]);
  partial[lidx] = x[tid.x];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint stride = tg_size.x / 2; stride > 0; stride /= 2) {
    if (lidx < stride) partial[lidx] += partial[lidx + stride];  // @tree-sum
    if (args.mode == 1) threadgroup_barrier(mem_flags::mem_device);
    if (args.mode == 2) threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (lidx == 0) y[tgid.x] = partial[0];
}
MB_REGISTER_KERNEL(test_check_tree_sum)

// Uninitialised read: only the first args.n threads fill the tile (all threads in the first args.mode
// threadgroups); every thread reads a slot.
kernel void test_check_uninitialised(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]],
                                     constant CheckArgs& args [[buffer(2)]], MB_THREAD_POSITION) {
  MB_THREADGROUP(float, tile, [256]);
  if (lidx < args.n || tgid.x < args.mode) tile[lidx] = x[tid.x];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[tid.x] = tile[tg_size.x - 1 - lidx];  // @uninitialised-read
}
MB_REGISTER_KERNEL(test_check_uninitialised)

// Divergent simd_sum: every lane sums once, then only lanes below args.n sum again (mode 0), or the
// others take a different simd function instead (mode 1), or all lanes sum again (mode 2: correct).
kernel void test_check_divergent_simd_sum(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]],
                                          constant CheckArgs& args [[buffer(2)]], MB_THREAD_POSITION) {
  float s = simd_sum(x[tid.x]);
  if (args.mode == 2 || simd_lane < args.n) {
    s = simd_sum(s + float(simd_lane));  // @divergent-sum
  } else if (args.mode == 1) {
    s = simd_max(s);  // @divergent-max
  }
  y[tid.x] = s;
}
MB_REGISTER_KERNEL(test_check_divergent_simd_sum)

// Divergent simdgroup_matrix load: lanes below args.n load a tile from threadgroup memory, the others
// skip to the store (mode 0); all lanes load (mode 2: correct). y: one 8x8 tile per simdgroup.
kernel void test_check_divergent_matrix_load(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]],
                                             constant CheckArgs& args [[buffer(2)]], MB_THREAD_POSITION) {
  MB_THREADGROUP(float, tile, [64]);
  for (uint e = lidx; e < 64; e += tg_size.x) tile[e] = x[e];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_float8x8 m = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  if (args.mode == 2 || simd_lane < args.n) simdgroup_load(m, tile, 8);  // @divergent-load
  simdgroup_store(m, y + 64 * simd_group, 8);  // @matrix-store
}
MB_REGISTER_KERNEL(test_check_divergent_matrix_load)

// Threadgroup memory shared inside one simdgroup: lane i writes slot i, then reads slot i ^ 1 after a
// simdgroup_barrier with mem_threadgroup (mode 2: correct), with mem_none (mode 1: no memory order), or
// with none (mode 0).
kernel void test_check_simd_exchange(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]],
                                     constant CheckArgs& args [[buffer(2)]], MB_THREAD_POSITION) {
  MB_THREADGROUP(float, slots, [256]);
  slots[lidx] = x[tid.x];  // @simd-write
  if (args.mode == 1) simdgroup_barrier(mem_flags::mem_none);
  if (args.mode == 2) simdgroup_barrier(mem_flags::mem_threadgroup);
  y[tid.x] = slots[lidx ^ 1u];  // @simd-read
}
MB_REGISTER_KERNEL(test_check_simd_exchange)

// Atomics are exempt: every thread adds into one threadgroup counter with no barrier between the adds,
// and a simdgroup_matrix tile goes through threadgroup memory (store, barrier, load) in each simdgroup.
kernel void test_ok_atomics_and_matrix(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]],
                                       DEVICE_PTR(uint) count [[buffer(2)]], MB_THREAD_POSITION) {
  MB_THREADGROUP(atomic_uint, n, );
  MB_THREADGROUP(float, tiles, [4][64]);
  if (lidx == 0) atomic_store_explicit(&n, 0u, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  atomic_fetch_add_explicit(&n, 1u, memory_order_relaxed);
  simdgroup_float8x8 m;
  simdgroup_load(m, x, 8);
  simdgroup_store(m, tiles[simd_group], 8);
  simdgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_load(m, tiles[simd_group], 8, ulong2(0, 0), true);
  simdgroup_store(m, y + 64 * simd_group, 8);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lidx == 0) count[tgid.x] = atomic_load_explicit(&n, memory_order_relaxed);
}
MB_REGISTER_KERNEL(test_ok_atomics_and_matrix)

// simdgroup_load from threadgroup memory (one check per source row): simdgroup 0 writes a 10x12 tile (pitch
// 12) from x; simdgroup 1 loads the 8x8 block at column 1, row 2 (transposed when args.n is 1) and stores it
// to y. Mode 2: a threadgroup barrier between (correct); mode 1: no barrier (a race); mode 0: the barrier,
// but element (row 5, column 4) of the tile is never written (an uninitialised read).
kernel void test_check_matrix_load(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]],
                                   constant CheckArgs& args [[buffer(2)]], MB_THREAD_POSITION) {
  MB_THREADGROUP(float, tile, [10 * 12]);
  if (simd_group == 0)
    for (uint e = simd_lane; e < 10 * 12; e += 32)
      if (args.mode != 0 || e != 5 * 12 + 4) tile[e] = x[e];  // @matrix-tile-write
  if (args.mode != 1) threadgroup_barrier(mem_flags::mem_threadgroup);
  if (simd_group == 1) {
    simdgroup_float8x8 m;
    simdgroup_load(m, tile, 12, ulong2(1, 2), args.n == 1);  // @matrix-tile-load
    simdgroup_store(m, y, 8);
  }
}
MB_REGISTER_KERNEL(test_check_matrix_load)

// Threadgroup index out of bounds: the array has 32 floats and every thread of a 64-thread group
// writes its own slot; the upper half lands past all declared threadgroup memory.
kernel void test_check_tg_out_of_bounds(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]],
                                        MB_THREAD_POSITION) {
  MB_THREADGROUP(float, small, [32]);
  threadgroup float* slot = small;  // through a pointer, as a kernel computing its index would
  slot[lidx] = x[tid.x];  // @oob-write
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[tid.x] = small[lidx % 32];
}
MB_REGISTER_KERNEL(test_check_tg_out_of_bounds)

// Bytes of one word: thread i writes byte i of a uchar array (four threads to each 4-byte word), then reads
// byte i - 1 with no barrier (mode 0: a race on that byte, in the same word for three threads in four) or
// after one (mode 2: correct). The writes alone touch distinct bytes and must not race.
kernel void test_check_byte_race(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]],
                                 constant CheckArgs& args [[buffer(2)]], MB_THREAD_POSITION) {
  MB_THREADGROUP(uchar, bytes, [64]);
  bytes[lidx] = uchar(x[tid.x]);  // @byte-write
  if (args.mode == 2) threadgroup_barrier(mem_flags::mem_threadgroup);
  y[tid.x] = lidx > 0 ? float(bytes[lidx - 1]) : 0.0f;  // @byte-read
}
MB_REGISTER_KERNEL(test_check_byte_race)

// Words, then parts of them: thread i writes word i whole (mode 2; skipped in mode 0), then its low half,
// and after the barrier reads the top byte of word i + 1. In mode 0 that byte was never written.
kernel void test_check_split_word(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]],
                                  constant CheckArgs& args [[buffer(2)]], MB_THREAD_POSITION) {
  MB_THREADGROUP(uint, words, [64]);
  if (args.mode == 2) words[lidx] = uint(x[tid.x]) << 24;
  ((threadgroup ushort*)words)[2 * lidx] = ushort(lidx);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[tid.x] = float(((threadgroup const uchar*)words)[4 * ((lidx + 1) % tg_size.x) + 3]);  // @split-read
}
MB_REGISTER_KERNEL(test_check_split_word)
