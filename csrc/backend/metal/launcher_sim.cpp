#include "backend/metal/launcher_sim.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <exception>
#include <mutex>

#include "backend/metal/sim_group.h"
#include "backend/metal/sim_registry.h"
#include "core/errors.h"
#include "core/thread_pool.h"

namespace mb::metal {

namespace rt = metal_sim::rt;

bool metal_sim_built() {
#ifdef MARKBASE_HAS_METAL_SIM
  return true;
#else
  return false;
#endif
}

SimLauncher& sim_launcher() {
  static SimLauncher launcher;
  return launcher;
}

bool SimLauncher::has_kernel(const std::string& kernel) const { return sim::find_kernel(kernel) != nullptr; }

uint32_t SimLauncher::max_threads_per_group(const std::string&) const { return uint32_t(rt::kMaxThreadsPerGroup); }

namespace {

const char* kind_name(rt::ParamKind k) {
  switch (k) {
    case rt::ParamKind::DeviceConst: return "device const pointer";
    case rt::ParamKind::DeviceWritable: return "device pointer";
    case rt::ParamKind::ConstantArgs: return "constant arguments";
  }
  return "?";
}

void check_bindings(const rt::KernelInfo& k, const Dispatch& d) {
  const bool has_args = k.num_params > 0 && k.params[k.num_params - 1] == rt::ParamKind::ConstantArgs;
  const int num_buffers = k.num_params - (has_args ? 1 : 0);
  if (int(d.buffers.size()) != num_buffers) {
    std::string sig;
    for (int i = 0; i < k.num_params; ++i) sig += cat(i ? ", " : "", "buffer(", i, "): ", kind_name(k.params[i]));
    throw DeviceError(cat("metal-sim: kernel '", k.name, "' takes ", num_buffers, " buffers (", sig, "), the dispatch binds ",
                          d.buffers.size()));
  }
  if (has_args && d.args.size() != k.args_bytes)
    throw DeviceError(cat("metal-sim: kernel '", k.name, "' expects ", k.args_bytes, " bytes of constant arguments at buffer(",
                          num_buffers, "), the dispatch passes ", d.args.size()));
  if (!has_args && !d.args.empty())
    throw DeviceError(cat("metal-sim: kernel '", k.name, "' takes no constant arguments, the dispatch passes ", d.args.size(), " bytes"));
  for (size_t i = 0; i < d.buffers.size(); ++i) {
    const BufferBinding& b = d.buffers[i];
    if (!b.data && b.bytes) throw DeviceError(cat("metal-sim: kernel '", k.name, "': buffer(", i, ") is null"));
  }
  // A buffer the kernel writes may not partially overlap another one (exactly the same range is an
  // in-place operation, which the op front doors allow explicitly).
  for (size_t i = 0; i < d.buffers.size(); ++i) {
    for (size_t j = i + 1; j < d.buffers.size(); ++j) {
      const BufferBinding &a = d.buffers[i], &b = d.buffers[j];
      if (!(a.writable || b.writable) || !a.bytes || !b.bytes) continue;
      const char *a0 = static_cast<const char*>(a.data), *b0 = static_cast<const char*>(b.data);
      const bool overlap = a0 < b0 + b.bytes && b0 < a0 + a.bytes;
      if (overlap && !(a0 == b0 && a.bytes == b.bytes))
        throw DeviceError(cat("metal-sim: kernel '", k.name, "': buffer(", i, ") and buffer(", j,
                              ") partially overlap and one of them is writable"));
    }
  }
}

// FNV-1a over the bytes, 8 at a time where possible (a change detector, not a cryptographic hash).
uint64_t hash_bytes(const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

void SimLauncher::dispatch(const Dispatch& d) {
  const rt::KernelInfo* k = sim::find_kernel(d.kernel);
  if (!k) throw DeviceError(cat("metal-sim: no kernel named '", d.kernel, "'"));
  const uint64_t threads = d.group.count();
  if (threads == 0 || threads > uint64_t(rt::kMaxThreadsPerGroup))
    throw DeviceError(cat("metal-sim: kernel '", k->name, "': threadgroup of ", d.group.x, "x", d.group.y, "x", d.group.z,
                          " threads (Metal allows 1 to ", rt::kMaxThreadsPerGroup, ")"));
  check_bindings(*k, d);
  if (d.grid.count() == 0) return;
  std::lock_guard<std::mutex> lk(mu_);
  Queued q{d, k, {}};
  for (size_t i = 0; i < d.buffers.size(); ++i) {
    const BufferBinding& b = d.buffers[i];
    if (b.writable || !b.bytes) continue;
    const char* p = static_cast<const char*>(b.data);
    bool device_written = false;  // by a dispatch queued before this one: it may change, legitimately
    for (const WrittenRange& w : writes_)
      if (p < w.data + w.bytes && w.data < p + b.bytes) {
        device_written = true;
        break;
      }
    if (!device_written) q.host_inputs.emplace_back(i, hash_bytes(b.data, b.bytes));
  }
  for (const BufferBinding& b : d.buffers)
    if (b.writable && b.bytes) writes_.push_back({static_cast<const char*>(b.data), b.bytes});
  queue_.push_back(std::move(q));  // runs at synchronize(), in encoding order, like a Metal command buffer
}

size_t SimLauncher::pending() const {
  std::lock_guard<std::mutex> lk(mu_);
  return queue_.size();
}

void SimLauncher::synchronize() {
  std::vector<Queued> batch;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (queue_.empty()) return;
    batch.swap(queue_);
    writes_.clear();
    ++committed_;
  }
  // A fault stops the command buffer: the dispatches after it never run (their owners are released).
  for (const Queued& q : batch) {
    // Only the host can have changed these since encoding: on a GPU that is a race.
    for (const auto& [i, hash] : q.host_inputs)
      if (hash_bytes(q.dispatch.buffers[i].data, q.dispatch.buffers[i].bytes) != hash)
        throw DeviceError(cat("metal-sim: kernel '", q.kernel->name, "': buffer(", i,
                              ") changed between encoding and execution and no earlier dispatch of the command "
                              "buffer wrote it: the host wrote memory a queued dispatch reads before synchronize()"));
    run(q);
  }
}

void SimLauncher::run(const Queued& q) {
  const Dispatch& d = q.dispatch;
  const rt::KernelInfo* k = q.kernel;
  const uint64_t num_groups = d.grid.count();

  // Buffer views; a read-only binding of a parameter the kernel may write gets a private copy.
  std::vector<rt::BufferView> views(d.buffers.size());
  std::vector<std::vector<unsigned char>> shadows(d.buffers.size());
  for (size_t i = 0; i < d.buffers.size(); ++i) {
    const BufferBinding& b = d.buffers[i];
    rt::BufferView& v = views[i];
    v.data = static_cast<unsigned char*>(b.data);
    v.bytes = b.bytes;
    v.kernel = k->name;
    v.index = int(i);
    v.writable = b.writable;
    if (k->params[i] == rt::ParamKind::DeviceWritable && !b.writable) {
      shadows[i].assign(v.data, v.data + v.bytes);
      v.data = shadows[i].data();
    }
  }
  // The argument blob, copied to storage aligned for any POD struct.
  std::vector<std::max_align_t> args((d.args.size() + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t) + 1);
  if (!d.args.empty()) std::memcpy(args.data(), d.args.data(), d.args.size());
  const rt::CallArgs call{k->name, views.data(), int(views.size()), args.data(), d.args.size()};

  const uint32_t threads3[3] = {d.group.x, d.group.y, d.group.z};
  const uint32_t grid3[3] = {d.grid.x, d.grid.y, d.grid.z};
  const sim::Checks checks = sim::checks_from_env();
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::exception_ptr first_error;
  uint64_t first_group = UINT64_MAX;
  parallel_for(int64_t(num_groups), 1, [&](int64_t b, int64_t e) {
    sim::GroupRunner& runner = sim::GroupRunner::for_this_thread();
    for (int64_t g = b; g < e && !failed.load(std::memory_order_relaxed); ++g) {
      const uint64_t u = uint64_t(g);
      const uint32_t group[3] = {uint32_t(u % grid3[0]), uint32_t((u / grid3[0]) % grid3[1]), uint32_t(u / (uint64_t(grid3[0]) * grid3[1]))};
      try {
        runner.run(*k, call, group, threads3, grid3, checks);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        if (u < first_group) {
          first_group = u;
          first_error = std::current_exception();
        }
        failed = true;
      }
    }
  });
  if (first_error) std::rethrow_exception(first_error);

  for (size_t i = 0; i < shadows.size(); ++i) {
    if (shadows[i].empty()) continue;
    const unsigned char* orig = static_cast<const unsigned char*>(d.buffers[i].data);
    auto mismatch = std::mismatch(shadows[i].begin(), shadows[i].end(), orig);
    if (mismatch.first != shadows[i].end()) {
      // Report the start of the element the first changed byte belongs to.
      const size_t elem = std::max<size_t>(1, k->elem_bytes[i]);
      const size_t offset = size_t(mismatch.first - shadows[i].begin()) / elem * elem;
      throw DeviceError(cat("metal-sim: kernel '", k->name, "' wrote buffer(", i, ") at byte offset ", offset,
                            ", but the dispatch bound it read-only (an input)"));
    }
  }
}

}  // namespace mb::metal
