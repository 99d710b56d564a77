// Fibers for metal-sim: every thread of a threadgroup runs on its own small stack, and the group's
// scheduler switches between them on one OS thread (threadgroup_barrier and simd_* yield).
// x86-64 / ELF uses a hand-written register switch (no syscall); other targets use ucontext.
#pragma once
#include <cstddef>

#if defined(__x86_64__) && defined(__ELF__) && !defined(MB_SIM_FORCE_UCONTEXT)
#define MB_SIM_ASM_FIBERS 1
#else
#define MB_SIM_ASM_FIBERS 0
#include <ucontext.h>
#endif

// AddressSanitizer must be told about every stack switch (its fake stacks and stack bounds follow the
// running fiber); without it, an exception thrown on a fiber stack draws false reports.
#if defined(__SANITIZE_ADDRESS__)
#define MB_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MB_SIM_ASAN 1
#endif
#endif
#ifndef MB_SIM_ASAN
#define MB_SIM_ASAN 0
#endif

namespace mb::metal::sim {

// A stack with an inaccessible guard page below it (a kernel overflowing it faults instead of
// corrupting its neighbour).
class FiberStack {
 public:
  explicit FiberStack(size_t bytes);
  ~FiberStack();
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  char* lo() const { return lo_; }
  size_t size() const { return size_; }

 private:
  char* map_ = nullptr;
  size_t map_bytes_ = 0;
  char* lo_ = nullptr;
  size_t size_ = 0;
};

struct FiberContext {
#if MB_SIM_ASM_FIBERS
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
  void (*fn)(void*) = nullptr;  // what a prepared fiber runs first
  void* arg = nullptr;
  // The stack this context runs on (the scheduler's is learned at its first switch); for ASan.
  const void* stack_bottom = nullptr;
  size_t stack_size = 0;
};

// Prepares `ctx` to start fn(arg) on `stack` the next time it is switched to. fn must never return
// (it switches away for good at its end).
void fiber_prepare(FiberContext& ctx, FiberStack& stack, void (*fn)(void*), void* arg);
// Saves the running context into `from` and resumes `to`.
void fiber_switch(FiberContext& from, FiberContext& to);
// The last switch of a fiber whose function has ended: `from` is never resumed (until prepared anew).
void fiber_exit(FiberContext& from, FiberContext& to);
// A fiber left suspended for good (its group failed): under ASan, the redzones of its frames are cleared
// from the stack so the next fiber on it starts from clean shadow memory (a no-op otherwise).
void fiber_abandoned(FiberStack& stack);

}  // namespace mb::metal::sim
