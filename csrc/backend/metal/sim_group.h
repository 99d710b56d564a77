// metal-sim: runs one threadgroup of a kernel with MSL semantics on the calling OS thread.
// Every thread is a fiber; the scheduler resumes runnable fibers in index order until all returned.
//   threadgroup_barrier: a thread waits until all threads of the group arrived.
//   simd_* functions:    a lane deposits its value and waits until every active lane (not yet
//                        returned) of its simdgroup of 32 did; then each lane reads all values.
//   threadgroup memory:  one 32 KiB arena per group, handed out per declaration (MB_THREADGROUP).
// Misuse Metal leaves undefined (a barrier some threads never reach, divergent simd_* calls) is a
// deadlock here and is reported as mb::DeviceError, as are faults the kernel's checked pointers raise.
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "backend/metal/sim_fiber.h"
#include "sim/runtime.h"

namespace mb::metal::sim {

class GroupRunner {
 public:
  // The runner of the calling OS thread (fibers and stacks are reused across groups).
  static GroupRunner& for_this_thread();

  // Runs threadgroup `group` of a grid of `grid` groups with `threads` threads each; rethrows the
  // first error a thread raised.
  void run(const metal_sim::rt::KernelInfo& kernel, const metal_sim::rt::CallArgs& call, const uint32_t group[3],
           const uint32_t threads[3], const uint32_t grid[3]);

  // Built-ins, called from kernel code on the running fiber.
  void barrier();
  void simd_barrier();
  metal_sim::rt::SimdRound simd_exchange(const void* value, size_t bytes);
  void* threadgroup_alloc(const void* key, size_t bytes, size_t align);
  // "kernel 'k', thread (x, y, z) of threadgroup (a, b, c)" for error messages.
  std::string where() const;

 private:
  enum class State : uint8_t { Ready, AtBarrier, AtSimd, Done };
  struct Thread {
    FiberContext ctx;
    State state = State::Ready;
  };
  struct SimdGroup {
    int active = 0;  // lanes that have not returned
    int arrived = 0;
    uint32_t arrived_mask = 0;
    uint32_t gen = 0;
    uint32_t masks[2] = {0, 0};
    alignas(16) unsigned char slots[2][metal_sim::rt::kSimdWidth][metal_sim::rt::kSimdSlotBytes];
  };
  struct TgDecl {
    const void* key;
    size_t offset, bytes;
  };

  static void fiber_main(void* arg);
  void run_thread(int i);
  void thread_done(int i);
  void yield();
  void release_simd(int s);
  [[noreturn]] void deadlock();
  metal_sim::rt::ThreadPos position(int i) const;

  const metal_sim::rt::KernelInfo* kernel_ = nullptr;
  const metal_sim::rt::CallArgs* call_ = nullptr;
  uint32_t group_[3] = {0, 0, 0}, threads_[3] = {1, 1, 1}, grid_[3] = {1, 1, 1};
  int n_ = 0, done_ = 0, at_barrier_ = 0, current_ = -1;
  std::vector<Thread> thread_;
  std::vector<std::unique_ptr<FiberStack>> stacks_;
  std::vector<SimdGroup> simd_;
  FiberContext scheduler_;
  std::exception_ptr error_;
  alignas(64) unsigned char tg_memory_[metal_sim::rt::kThreadgroupMemoryBytes];
  size_t tg_used_ = 0;
  std::vector<TgDecl> tg_decls_;
};

}  // namespace mb::metal::sim
