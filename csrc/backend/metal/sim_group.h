// metal-sim: runs one threadgroup of a kernel with MSL semantics on the calling OS thread.
// Every thread is a fiber; the scheduler resumes runnable fibers in index order until all returned.
//   threadgroup_barrier: a thread waits until all threads of the group arrived.
//   simd_* functions:    a lane deposits its value and waits until every active lane (not yet
//                        returned) of its simdgroup of 32 did; then each lane reads all values.
//   threadgroup memory:  one 32 KiB arena per group, handed out per declaration (MB_THREADGROUP).
// Misuse Metal leaves undefined (a barrier some threads never reach, divergent simd_* calls) is a
// deadlock here and is reported as mb::DeviceError, as are faults the kernel's checked pointers raise.
// With full checks (sim_checks.h) it also reports threadgroup-memory races and uninitialised reads
// (sim_shadow.h) and simdgroup calls not made by the simdgroup's active lanes together.
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "backend/metal/sim_checks.h"
#include "backend/metal/sim_fiber.h"
#include "backend/metal/sim_shadow.h"
#include "sim/runtime.h"

namespace mb::metal::sim {

class GroupRunner {
 public:
  // The runner of the calling OS thread (fibers and stacks are reused across groups).
  static GroupRunner& for_this_thread();
  GroupRunner();
  ~GroupRunner();
  GroupRunner(const GroupRunner&) = delete;
  GroupRunner& operator=(const GroupRunner&) = delete;

  // Runs threadgroup `group` of a grid of `grid` groups with `threads` threads each; rethrows the
  // first error a thread raised.
  void run(const metal_sim::rt::KernelInfo& kernel, const metal_sim::rt::CallArgs& call, const uint32_t group[3],
           const uint32_t threads[3], const uint32_t grid[3], Checks checks);

  // What a simdgroup call is, for the uniformity check and its messages.
  enum class Collective : uint8_t { SimdFunction, SimdBarrier, Matrix };

  // Built-ins, called from kernel code on the running fiber. `site` is the call in the kernel source.
  void barrier(unsigned mem_flags);
  void simd_barrier(unsigned mem_flags, const metal_sim::rt::CallSite& site);
  metal_sim::rt::SimdRound simd_exchange(const void* value, size_t bytes, const metal_sim::rt::CallSite& site,
                                         Collective kind, unsigned mem_flags = 0);
  metal_sim::rt::MatrixStep matrix_step(const metal_sim::rt::CallSite& site);
  bool is_threadgroup_memory(const void* p) const;
  void note_atomic(const void* p, size_t bytes);
  void* threadgroup_alloc(const void* key, size_t bytes, size_t align, const char* name);
  // "kernel 'k', thread (x, y, z) of threadgroup (a, b, c)" for error messages.
  std::string where() const;

  // The load/store hooks (sim_checks.cpp) call this for an access inside some runner's arena.
  static void threadgroup_access(const unsigned char* p, size_t bytes, bool write, const void* return_address);

 private:
  enum class State : uint8_t { Ready, AtBarrier, AtSimd, Done };
  struct Thread {
    FiberContext ctx;
    State state = State::Ready;
    uint32_t rounds = 0;  // simdgroup calls this thread took part in
  };
  struct SimdGroup {
    int active = 0;  // lanes that have not returned
    int arrived = 0;
    uint32_t arrived_mask = 0;
    uint32_t gen = 0;
    uint32_t masks[2] = {0, 0};
    // The open round (full checks): the call its first lane reached, what it is, its barrier flags.
    metal_sim::rt::CallSite site{};
    Collective kind = Collective::SimdFunction;
    unsigned mem_flags = 0;
    uint16_t sync = 0;  // simdgroup_barrier(mem_threadgroup) calls completed (race check)
    alignas(16) unsigned char slots[2][metal_sim::rt::kSimdWidth][metal_sim::rt::kSimdSlotBytes];
    metal_sim::rt::SimdMemo memo[2];  // as slots: one per round, double-buffered
  };
  struct TgDecl {
    const void* key;
    const char* name;
    size_t offset, bytes;
  };

  static void fiber_main(void* arg);
  void run_thread(int i);
  void thread_done(int i);
  void yield();
  void release_simd(int s);
  [[noreturn]] void deadlock();
  // After flag(): leaves the running fiber for good (the scheduler stops at the error).
  [[noreturn]] void stop_fiber();
  // Records a finding without leaving the fiber (from the scheduler's bookkeeping).
  void flag(const std::string& message);
  metal_sim::rt::ThreadPos position(int i) const;
  std::string group_name() const;     // "metal-sim: kernel 'k', threadgroup (a, b, c)"
  std::string thread_name(int i) const;  // "thread (x, y, z)" (thread_position_in_threadgroup)
  std::string tg_byte_name(size_t offset) const;  // "byte 4 of threadgroup array 'tile'"
  static std::string lanes_name(uint32_t mask);  // "lanes 0-15, 20"
  static const char* collective_name(Collective kind);
  static std::string site_name(const metal_sim::rt::CallSite& site);  // "metal/norm.metal:41:12"
  void check_round(int s);
  // A full check's finding on a threadgroup access: flags it and stops the fiber (never returns). Out of line
  // and cold: threadgroup_access runs on every threadgroup load and store.
  [[gnu::cold, gnu::noinline]] void report(const TgShadow::Report& rep, bool write, const TgShadow::Access& me);
  [[gnu::cold, gnu::noinline]] void out_of_bounds(size_t off, size_t bytes, bool write, const TgShadow::Access& me);

  const metal_sim::rt::KernelInfo* kernel_ = nullptr;
  const metal_sim::rt::CallArgs* call_ = nullptr;
  uint32_t group_[3] = {0, 0, 0}, threads_[3] = {1, 1, 1}, grid_[3] = {1, 1, 1};
  int n_ = 0, done_ = 0, at_barrier_ = 0, current_ = -1;
  std::vector<Thread> thread_;
  std::vector<std::unique_ptr<FiberStack>> stacks_;
  std::vector<SimdGroup> simd_;
  FiberContext scheduler_;
  std::exception_ptr error_;
  unsigned char* tg_memory_;  // kThreadgroupMemoryBytes, from sim_checks.h's arena range
  size_t tg_used_ = 0;
  std::vector<TgDecl> tg_decls_;
  Checks checks_ = Checks::Full;
  std::unique_ptr<TgShadow> shadow_;  // made at the first run with full checks
  unsigned barrier_flags_ = 0;        // mem_flags of the threads waiting at the open barrier
};

}  // namespace mb::metal::sim
