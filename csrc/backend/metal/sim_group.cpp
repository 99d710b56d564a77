#include "backend/metal/sim_group.h"

#include <algorithm>
#include <cstring>

#include "core/errors.h"

namespace mb::metal::sim {

namespace rt = metal_sim::rt;

namespace {
// Fiber stack per kernel thread: kernels keep small locals; the margin is for exception unwinding.
constexpr size_t kFiberStackBytes = 128 * 1024;
thread_local GroupRunner* t_running = nullptr;  // the runner executing a group on this OS thread

std::string where_now() { return t_running ? t_running->where() : std::string("outside a running kernel"); }

GroupRunner& running(const char* builtin) {
  if (!t_running) throw DeviceError(cat("metal-sim: ", builtin, " called outside a running kernel"));
  return *t_running;
}
}  // namespace

GroupRunner& GroupRunner::for_this_thread() {
  thread_local std::unique_ptr<GroupRunner> runner(new GroupRunner);
  return *runner;
}

rt::ThreadPos GroupRunner::position(int i) const {
  rt::ThreadPos p{};
  const uint32_t u = uint32_t(i);
  const uint32_t local[3] = {u % threads_[0], (u / threads_[0]) % threads_[1], u / (threads_[0] * threads_[1])};
  for (int d = 0; d < 3; ++d) {
    p.thread_in_group[d] = local[d];
    p.group_in_grid[d] = group_[d];
    p.threads_per_group[d] = threads_[d];
    p.groups_per_grid[d] = grid_[d];
    p.thread_in_grid[d] = group_[d] * threads_[d] + local[d];
  }
  p.index_in_group = u;
  p.simd_lane = u % rt::kSimdWidth;
  p.simd_group = u / rt::kSimdWidth;
  return p;
}

std::string GroupRunner::where() const {
  std::string s = cat("kernel '", kernel_ ? kernel_->name : "?", "'");
  if (current_ >= 0) {
    rt::ThreadPos p = position(current_);
    s += cat(", thread_position_in_grid (", p.thread_in_grid[0], ", ", p.thread_in_grid[1], ", ", p.thread_in_grid[2],
             ") of threadgroup (", group_[0], ", ", group_[1], ", ", group_[2], ")");
  }
  return s;
}

void GroupRunner::run(const rt::KernelInfo& kernel, const rt::CallArgs& call, const uint32_t group[3],
                      const uint32_t threads[3], const uint32_t grid[3]) {
  kernel_ = &kernel;
  call_ = &call;
  for (int d = 0; d < 3; ++d) {
    group_[d] = group[d];
    threads_[d] = threads[d];
    grid_[d] = grid[d];
  }
  n_ = int(threads[0] * threads[1] * threads[2]);
  done_ = at_barrier_ = 0;
  current_ = -1;
  error_ = nullptr;
  if (int(thread_.size()) < n_) thread_.resize(size_t(n_));
  while (int(stacks_.size()) < n_) stacks_.push_back(std::make_unique<FiberStack>(kFiberStackBytes));
  const int num_simd = (n_ + rt::kSimdWidth - 1) / rt::kSimdWidth;
  if (int(simd_.size()) < num_simd) simd_.resize(size_t(num_simd));
  for (int s = 0; s < num_simd; ++s) {
    SimdGroup& sg = simd_[size_t(s)];
    sg.active = std::min(rt::kSimdWidth, n_ - s * rt::kSimdWidth);
    sg.arrived = 0;
    sg.arrived_mask = 0;
    sg.gen = 0;
  }
  tg_used_ = 0;
  tg_decls_.clear();
  for (int i = 0; i < n_; ++i) {
    thread_[size_t(i)].state = State::Ready;
    fiber_prepare(thread_[size_t(i)].ctx, *stacks_[size_t(i)], &GroupRunner::fiber_main, reinterpret_cast<void*>(intptr_t(i)));
  }

  GroupRunner* outer = t_running;
  t_running = this;
  while (done_ < n_ && !error_) {
    bool progressed = false;
    for (int i = 0; i < n_ && !error_; ++i) {
      if (thread_[size_t(i)].state != State::Ready) continue;
      progressed = true;
      current_ = i;
      fiber_switch(scheduler_, thread_[size_t(i)].ctx);
    }
    current_ = -1;
    if (!progressed && !error_) {
      try {
        deadlock();
      } catch (...) {
        error_ = std::current_exception();
      }
    }
  }
  t_running = outer;
  current_ = -1;
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void GroupRunner::fiber_main(void* arg) {
  GroupRunner& g = *t_running;
  const int i = int(reinterpret_cast<intptr_t>(arg));
  g.run_thread(i);
  g.thread_done(i);
  fiber_exit(g.thread_[size_t(i)].ctx, g.scheduler_);
  std::abort();  // a finished fiber is never resumed
}

void GroupRunner::run_thread(int i) {
  try {
    const rt::ThreadPos pos = position(i);
    kernel_->invoke(*call_, pos);
  } catch (...) {
    if (!error_) error_ = std::current_exception();
  }
}

void GroupRunner::thread_done(int i) {
  thread_[size_t(i)].state = State::Done;
  ++done_;
  SimdGroup& sg = simd_[size_t(i / rt::kSimdWidth)];
  --sg.active;
  // The lanes still waiting at a simd_* function no longer wait for this one.
  if (sg.arrived > 0 && sg.arrived == sg.active) release_simd(i / rt::kSimdWidth);
}

void GroupRunner::yield() {
  const int i = current_;
  fiber_switch(thread_[size_t(i)].ctx, scheduler_);
  // Resumed by the scheduler, which set current_ = i again.
}

void GroupRunner::barrier() {
  if (++at_barrier_ == n_) {
    // The last thread to arrive releases the others and carries on.
    for (int j = 0; j < n_; ++j)
      if (thread_[size_t(j)].state == State::AtBarrier) thread_[size_t(j)].state = State::Ready;
    at_barrier_ = 0;
    return;
  }
  thread_[size_t(current_)].state = State::AtBarrier;
  yield();
}

void GroupRunner::release_simd(int s) {
  SimdGroup& sg = simd_[size_t(s)];
  sg.masks[sg.gen & 1] = sg.arrived_mask;
  sg.arrived = 0;
  sg.arrived_mask = 0;
  ++sg.gen;
  const int first = s * rt::kSimdWidth, last = std::min(n_, first + rt::kSimdWidth);
  for (int j = first; j < last; ++j)
    if (thread_[size_t(j)].state == State::AtSimd) thread_[size_t(j)].state = State::Ready;
}

// Values go into slots[gen & 1]: a lane can deposit into the next round only after every lane left
// this one, so two alternating slot sets are enough.
rt::SimdRound GroupRunner::simd_exchange(const void* value, size_t bytes) {
  const int i = current_;
  const int s = i / rt::kSimdWidth;
  const uint32_t lane = uint32_t(i % rt::kSimdWidth);
  SimdGroup& sg = simd_[size_t(s)];
  const uint32_t gen = sg.gen;
  if (bytes) std::memcpy(sg.slots[gen & 1][lane], value, bytes);
  ++sg.arrived;
  sg.arrived_mask |= 1u << lane;
  if (sg.arrived == sg.active) {
    release_simd(s);
  } else {
    thread_[size_t(i)].state = State::AtSimd;
    yield();
  }
  return {&sg.slots[gen & 1][0][0], sg.masks[gen & 1], lane};
}

void GroupRunner::simd_barrier() { simd_exchange(nullptr, 0); }

void* GroupRunner::threadgroup_alloc(const void* key, size_t bytes, size_t align) {
  for (const TgDecl& d : tg_decls_)
    if (d.key == key) return tg_memory_ + d.offset;
  align = std::max<size_t>(align, 16);
  const size_t offset = (tg_used_ + align - 1) / align * align;
  if (offset + bytes > rt::kThreadgroupMemoryBytes)
    throw DeviceError(cat("metal-sim: ", where(), " declares ", offset + bytes, " bytes of threadgroup memory; Apple GPUs have ",
                          rt::kThreadgroupMemoryBytes));
  std::memset(tg_memory_ + offset, 0xFF, bytes);  // undefined on Metal: NaN / all-ones here
  tg_used_ = offset + bytes;
  tg_decls_.push_back({key, offset, bytes});
  return tg_memory_ + offset;
}

void GroupRunner::deadlock() {
  int at_barrier = 0, at_simd = 0;
  for (int i = 0; i < n_; ++i) {
    if (thread_[size_t(i)].state == State::AtBarrier) ++at_barrier;
    if (thread_[size_t(i)].state == State::AtSimd) ++at_simd;
  }
  const std::string who = cat("metal-sim: kernel '", kernel_->name, "', threadgroup (", group_[0], ", ", group_[1], ", ", group_[2], "): ");
  if (at_barrier && !at_simd)
    throw DeviceError(cat(who, "threadgroup_barrier reached by ", at_barrier, " of ", n_, " threads; ", done_,
                          " returned before reaching it (every thread of a threadgroup must reach each barrier)"));
  throw DeviceError(cat(who, "threads wait at different synchronisation points (", at_barrier, " at threadgroup_barrier, ",
                        at_simd, " at a simd_* function, ", done_,
                        " returned): a barrier or simd_* function inside divergent control flow"));
}

}  // namespace mb::metal::sim

// ---- The runtime ABI the kernels call (metal/sim/runtime.h). ----
namespace metal_sim::rt {

void fail_access(const BufferView& b, long long byte_offset, size_t access_bytes, bool misaligned) {
  std::string where = mb::metal::sim::where_now();
  if (misaligned)
    throw mb::DeviceError(mb::cat("metal-sim: ", where, ": misaligned ", access_bytes, "-byte access to buffer(", b.index,
                                  ") at byte offset ", byte_offset));
  throw mb::DeviceError(mb::cat("metal-sim: ", where, ": out-of-bounds access to buffer(", b.index, ") at byte offset ",
                                byte_offset, " (", access_bytes, " bytes; the buffer has ", b.bytes, " bytes)"));
}

void fail(const char* what) {
  throw mb::DeviceError(mb::cat("metal-sim: ", mb::metal::sim::where_now(), ": ", what));
}

void threadgroup_barrier() { mb::metal::sim::running("threadgroup_barrier").barrier(); }
void simdgroup_barrier() { mb::metal::sim::running("simdgroup_barrier").simd_barrier(); }
SimdRound simd_exchange(const void* value, size_t bytes) {
  if (bytes > kSimdSlotBytes) fail("simd_* value larger than the exchange slot");
  return mb::metal::sim::running("simd_*").simd_exchange(value, bytes);
}
void* threadgroup_alloc(const void* key, size_t bytes, size_t align) {
  return mb::metal::sim::running("threadgroup memory").threadgroup_alloc(key, bytes, align);
}

}  // namespace metal_sim::rt
