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
constexpr unsigned kMemThreadgroup = 2;         // MSL mem_flags::mem_threadgroup

std::string where_now() { return t_running ? t_running->where() : std::string("outside a running kernel"); }

GroupRunner& running(const char* builtin) {
  if (!t_running) throw DeviceError(cat("metal-sim: ", builtin, " called outside a running kernel"));
  return *t_running;
}
}  // namespace

GroupRunner::GroupRunner() : tg_memory_(take_arena()) {}
GroupRunner::~GroupRunner() { give_back_arena(tg_memory_); }

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
                      const uint32_t threads[3], const uint32_t grid[3], Checks checks) {
  kernel_ = &kernel;
  checks_ = checks;
  barrier_flags_ = 0;
  if (checks_ == Checks::Full) {
    if (!shadow_) shadow_ = std::make_unique<TgShadow>();
    shadow_->begin_group();
  }
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
    sg.sync = 0;
  }
  tg_used_ = 0;
  tg_decls_.clear();
  for (int i = 0; i < n_; ++i) {
    thread_[size_t(i)].state = State::Ready;
    thread_[size_t(i)].rounds = 0;
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
    for (int i = 0; i < n_; ++i)
      if (thread_[size_t(i)].state != State::Done) fiber_abandoned(*stacks_[size_t(i)]);
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

void GroupRunner::barrier(unsigned mem_flags) {
  barrier_flags_ |= mem_flags;
  if (++at_barrier_ == n_) {
    // The last thread to arrive releases the others and carries on.
    for (int j = 0; j < n_; ++j)
      if (thread_[size_t(j)].state == State::AtBarrier) thread_[size_t(j)].state = State::Ready;
    at_barrier_ = 0;
    // Only mem_flags::mem_threadgroup orders threadgroup memory: then the race check starts afresh.
    if (checks_ == Checks::Full && (barrier_flags_ & kMemThreadgroup)) shadow_->next_epoch();
    barrier_flags_ = 0;
    return;
  }
  thread_[size_t(current_)].state = State::AtBarrier;
  yield();
}

void GroupRunner::release_simd(int s) {
  SimdGroup& sg = simd_[size_t(s)];
  if (checks_ == Checks::Full) check_round(s);
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
rt::SimdRound GroupRunner::simd_exchange(const void* value, size_t bytes, const rt::CallSite& site, Collective kind,
                                         unsigned mem_flags) {
  const int i = current_;
  const int s = i / rt::kSimdWidth;
  const uint32_t lane = uint32_t(i % rt::kSimdWidth);
  SimdGroup& sg = simd_[size_t(s)];
  const uint32_t gen = sg.gen;
  if (checks_ == Checks::Full) {
    // Every lane of a round must come from the same call: lanes at two different calls would be
    // exchanging values of two different operations.
    if (sg.arrived == 0) {
      sg.site = site;
      sg.kind = kind;
      sg.mem_flags = 0;
    } else if (site.line != sg.site.line || site.column != sg.site.column ||
               (site.file != sg.site.file && std::strcmp(site.file, sg.site.file) != 0)) {
      flag(cat(group_name(), ": divergent simdgroup calls: lane ", lane, " of simdgroup ", s, " (", thread_name(i),
                   ") reached ", collective_name(kind), " at ", site_name(site), " while ", lanes_name(sg.arrived_mask),
                   (__builtin_popcount(sg.arrived_mask) == 1 ? " waits at " : " wait at "), collective_name(sg.kind), " at ", site_name(sg.site),
                   "; simd_*, simdgroup_barrier and simdgroup_matrix calls must be reached by all active lanes of a "
                   "simdgroup together"));
      stop_fiber();
    }
    sg.mem_flags |= mem_flags;
  }
  if (sg.arrived == 0) sg.memo[gen & 1].key = nullptr;  // a new round: no reduction computed yet
  if (bytes) std::memcpy(sg.slots[gen & 1][lane], value, bytes);
  ++sg.arrived;
  sg.arrived_mask |= 1u << lane;
  if (sg.arrived == sg.active) {
    release_simd(s);
  } else {
    thread_[size_t(i)].state = State::AtSimd;
    yield();
  }
  return {&sg.slots[gen & 1][0][0], sg.masks[gen & 1], lane, &sg.memo[gen & 1]};
}

void GroupRunner::simd_barrier(unsigned mem_flags, const rt::CallSite& site) {
  simd_exchange(nullptr, 0, site, Collective::SimdBarrier, mem_flags);
}

rt::MatrixStep GroupRunner::matrix_step(const rt::CallSite& site) {
  if (checks_ != Checks::Full) return {uint32_t(current_ % rt::kSimdWidth), false};
  const rt::SimdRound r = simd_exchange(nullptr, 0, site, Collective::Matrix);
  return {r.lane, true};
}

// Full checks, when a round completes: a lane that returned after taking part in earlier simdgroup
// calls was active and skipped this one; a simdgroup_matrix operation needs all 32 lanes.
void GroupRunner::check_round(int s) {
  SimdGroup& sg = simd_[size_t(s)];
  const int first = s * rt::kSimdWidth, last = std::min(n_, first + rt::kSimdWidth);
  uint32_t skipped = 0;
  for (int j = first; j < last; ++j) {
    const Thread& t = thread_[size_t(j)];
    if (t.state == State::Done && t.rounds > 0 && !((sg.arrived_mask >> (j - first)) & 1u)) skipped |= 1u << (j - first);
  }
  if (skipped) {
    flag(cat(group_name(), ": ", collective_name(sg.kind), " at ", site_name(sg.site), " was reached by ",
             lanes_name(sg.arrived_mask), " of simdgroup ", s, " only: ", lanes_name(skipped),
             " took part in earlier simdgroup calls and returned without reaching it (a simdgroup call in divergent "
             "control flow; all active lanes must make it)"));
  } else if (sg.kind == Collective::Matrix && sg.arrived_mask != 0xFFFFFFFFu) {
    flag(cat(group_name(), ": simdgroup_matrix operation at ", site_name(sg.site), " reached by ",
             lanes_name(sg.arrived_mask), " of simdgroup ", s, " (", last - first,
             " threads); all 32 lanes of a simdgroup must take part in every simdgroup_matrix load, store and multiply"));
  }
  for (int j = first; j < last; ++j)
    if ((sg.arrived_mask >> (j - first)) & 1u) ++thread_[size_t(j)].rounds;
  if (sg.kind == Collective::SimdBarrier && (sg.mem_flags & kMemThreadgroup)) ++sg.sync;
}

bool GroupRunner::is_threadgroup_memory(const void* p) const {
  const uintptr_t off = reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(tg_memory_);
  return off < rt::kThreadgroupMemoryBytes;
}

void GroupRunner::note_atomic(const void* p, size_t bytes) {
  if (checks_ == Checks::Full && is_threadgroup_memory(p))
    shadow_->note_atomic(size_t(static_cast<const unsigned char*>(p) - tg_memory_), bytes);
}

void GroupRunner::threadgroup_access(const unsigned char* p, size_t bytes, bool write, const void* return_address) {
  GroupRunner* g = t_running;
  if (!g || g->checks_ != Checks::Full || g->current_ < 0) return;
  const size_t off = size_t(p - g->tg_memory_);
  if (off >= rt::kThreadgroupMemoryBytes) return;  // another runner's arena: not this group's memory
  const TgShadow::Access me{0, code_offset(return_address), uint16_t(g->current_),
                            g->simd_[size_t(g->current_ / rt::kSimdWidth)].sync};
  if (off + bytes > g->tg_used_) g->out_of_bounds(off, bytes, write, me);
  const TgShadow::Report rep =
      g->shadow_->access(off, bytes, write, me, [g](uint16_t t) { return g->simd_[size_t(t / rt::kSimdWidth)].sync; });
  if (rep.finding != TgShadow::Finding::None) g->report(rep, write, me);
}

void GroupRunner::out_of_bounds(size_t off, size_t bytes, bool write, const TgShadow::Access& me) {
  flag(cat(group_name(), ": ", thread_name(me.thread), (write ? " writes " : " reads "), bytes, " bytes at threadgroup offset ",
           off, " at ", code_location(me.code), ", past the ", tg_used_,
           " bytes of threadgroup memory the kernel declared (an array index out of bounds)"));
  stop_fiber();
}

void GroupRunner::report(const TgShadow::Report& rep, bool write, const TgShadow::Access& me) {
  if (rep.finding == TgShadow::Finding::Uninitialised) {
    flag(cat(group_name(), ": ", thread_name(me.thread), " reads ", tg_byte_name(rep.offset), " at ",
                 code_location(me.code),
                 ", which no thread of the threadgroup has written (threadgroup memory is undefined until written)"));
    stop_fiber();
  }
  const bool same_simd = rep.earlier.thread / rt::kSimdWidth == me.thread / rt::kSimdWidth;
  flag(cat(group_name(), ": threadgroup-memory race on ", tg_byte_name(rep.offset), ": ", thread_name(me.thread),
               (write ? " writes" : " reads"), " it at ", code_location(me.code), " and ", thread_name(rep.earlier.thread),
               (rep.earlier_was_write ? " wrote" : " read"), " it at ", code_location(rep.earlier.code),
               " with no threadgroup_barrier(mem_flags::mem_threadgroup) between them",
               (same_simd ? " (nor a simdgroup_barrier(mem_flags::mem_threadgroup): the threads share a simdgroup)" : "")));
  stop_fiber();
}

// Called with no temporaries alive in its caller's frame: this fiber is abandoned, so nothing on its
// stack is ever destroyed.
void GroupRunner::stop_fiber() {
  yield();  // the scheduler stops at the error; this fiber is never resumed
  std::abort();
}

void GroupRunner::flag(const std::string& message) {
  if (!error_) error_ = std::make_exception_ptr(DeviceError(message));
}

std::string GroupRunner::group_name() const {
  return cat("metal-sim: kernel '", kernel_ ? kernel_->name : "?", "', threadgroup (", group_[0], ", ", group_[1], ", ",
             group_[2], ")");
}

std::string GroupRunner::thread_name(int i) const {
  const rt::ThreadPos p = position(i);
  return cat("thread (", p.thread_in_group[0], ", ", p.thread_in_group[1], ", ", p.thread_in_group[2], ")");
}

std::string GroupRunner::tg_byte_name(size_t offset) const {
  for (const TgDecl& d : tg_decls_)
    if (offset >= d.offset && offset < d.offset + d.bytes)
      return cat("byte ", offset - d.offset, " of threadgroup array '", d.name, "' (", d.bytes, " bytes)");
  return cat("threadgroup byte ", offset);
}

std::string GroupRunner::lanes_name(uint32_t mask) {
  std::string out;
  int count = 0;
  for (int l = 0; l < rt::kSimdWidth;) {
    if (!((mask >> l) & 1u)) {
      ++l;
      continue;
    }
    int e = l;
    while (e + 1 < rt::kSimdWidth && ((mask >> (e + 1)) & 1u)) ++e;
    out += cat(out.empty() ? "" : ", ", l, e > l ? cat("-", e) : std::string());
    count += e - l + 1;
    l = e + 1;
  }
  return cat(count == 1 ? "lane " : "lanes ", out.empty() ? std::string("none") : out);
}

std::string GroupRunner::site_name(const rt::CallSite& site) {
  return cat(source_path(site.file ? site.file : "?"), ":", site.line, ":", site.column);
}

const char* GroupRunner::collective_name(Collective kind) {
  switch (kind) {
    case Collective::SimdFunction: return "a simd_* function";
    case Collective::SimdBarrier: return "simdgroup_barrier";
    case Collective::Matrix: return "a simdgroup_matrix operation";
  }
  return "?";
}

void* GroupRunner::threadgroup_alloc(const void* key, size_t bytes, size_t align, const char* name) {
  for (const TgDecl& d : tg_decls_)
    if (d.key == key) return tg_memory_ + d.offset;
  align = std::max<size_t>(align, 16);
  const size_t offset = (tg_used_ + align - 1) / align * align;
  if (offset + bytes > rt::kThreadgroupMemoryBytes)
    throw DeviceError(cat("metal-sim: ", where(), " declares ", offset + bytes, " bytes of threadgroup memory; Apple GPUs have ",
                          rt::kThreadgroupMemoryBytes));
  std::memset(tg_memory_ + offset, 0xFF, bytes);  // undefined on Metal: NaN / all-ones here
  tg_used_ = offset + bytes;
  tg_decls_.push_back({key, name, offset, bytes});
  if (checks_ == Checks::Full) shadow_->declare(offset, bytes);
  return tg_memory_ + offset;
}

void GroupRunner::deadlock() {
  int at_barrier = 0, at_simd = 0;
  for (int i = 0; i < n_; ++i) {
    if (thread_[size_t(i)].state == State::AtBarrier) ++at_barrier;
    if (thread_[size_t(i)].state == State::AtSimd) ++at_simd;
  }
  const std::string who = group_name() + ": ";
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

using Collective = mb::metal::sim::GroupRunner::Collective;

// Each simdgroup built-in passes its call's source location, which the uniformity check compares
// between the lanes of a round.
void threadgroup_barrier(unsigned mem_flags) { mb::metal::sim::running("threadgroup_barrier").barrier(mem_flags); }
void simdgroup_barrier(unsigned mem_flags, CallSite site) {
  mb::metal::sim::running("simdgroup_barrier").simd_barrier(mem_flags, site);
}
SimdRound simd_exchange(const void* value, size_t bytes, CallSite site) {
  if (bytes > kSimdSlotBytes) fail("simd_* value larger than the exchange slot");
  return mb::metal::sim::running("simd_*").simd_exchange(value, bytes, site, Collective::SimdFunction);
}
MatrixStep simdgroup_matrix_step(CallSite site) { return mb::metal::sim::running("simdgroup_matrix").matrix_step(site); }
bool is_threadgroup_memory(const void* p) { return mb::metal::sim::running("threadgroup memory").is_threadgroup_memory(p); }
void read_rows(void* dst, const void* src, size_t row_bytes, size_t rows, size_t stride_bytes) {
  const void* caller = __builtin_return_address(0);  // in the kernel: its line names the access
  for (size_t r = 0; r < rows; ++r) {
    const unsigned char* row = static_cast<const unsigned char*>(src) + r * stride_bytes;
    mb::metal::sim::GroupRunner::threadgroup_access(row, row_bytes, false, caller);
    std::memcpy(static_cast<unsigned char*>(dst) + r * row_bytes, row, row_bytes);
  }
}
void note_threadgroup_atomic(const void* p, size_t bytes) { mb::metal::sim::running("atomic").note_atomic(p, bytes); }
void* threadgroup_alloc(const void* key, size_t bytes, size_t align, const char* name) {
  return mb::metal::sim::running("threadgroup memory").threadgroup_alloc(key, bytes, align, name);
}

}  // namespace metal_sim::rt
