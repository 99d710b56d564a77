#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace mb {

namespace {
thread_local bool t_inside_pool = false;
}

int default_num_threads() {
  if (const char* env = std::getenv("MARKBASE_NUM_THREADS")) {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v >= 1 && v <= 1024) return int(v);
  }
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? int(hc) : 1;
}

// Hand-off between the caller and the workers: a job is published by bumping `generation`; workers
// and the caller spin briefly (decode issues hundreds of small jobs per token, and a sleep/wake round
// trip costs tens of microseconds) before blocking on a condition variable.
constexpr int kSpinIterations = 4000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Chunks are claimed from one word, (chunk count) << 32 | (next chunk index), so a claim also says whether
// the job still has work. A job ends when its chunks are done, whichever threads ran them: a worker that
// wakes late (a busy machine) finds nothing to claim, or claims from a later job, and the caller never
// waits for a worker that took no chunk.
struct ThreadPool::Impl {
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable wake, done;
  // The current job; written before `claim` is published, read only by a thread holding a claimed chunk
  // (the job cannot end before that chunk is done, so these stay put while it reads them).
  const FunctionRef<void(int64_t, int64_t)>* job = nullptr;
  int64_t n = 0, chunk = 1;
  std::atomic<uint64_t> claim{0};
  std::atomic<int64_t> finished{0};     // chunks of the current job done
  std::atomic<uint64_t> generation{0};  // bumped per job to wake the workers
  std::atomic<bool> stop{false};
  std::mutex error_mu;
  std::exception_ptr error;

  void run_chunks() {
    for (;;) {
      const uint64_t c = claim.fetch_add(1, std::memory_order_acq_rel);
      const int64_t count = int64_t(c >> 32), i = int64_t(c & 0xFFFFFFFFu);
      if (i >= count) return;
      const int64_t b = i * chunk, e = std::min(n, b + chunk);
      try {
        (*job)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lk(error_mu);
        if (!error) error = std::current_exception();
      }
      if (finished.fetch_add(1, std::memory_order_acq_rel) + 1 == count) {
        std::lock_guard<std::mutex> lk(mu);
        done.notify_one();
      }
    }
  }

  void worker_loop() {
    t_inside_pool = true;
    uint64_t seen = 0;
    for (;;) {
      int spins = 0;
      while (generation.load(std::memory_order_acquire) == seen && !stop.load(std::memory_order_acquire)) {
        if (++spins < kSpinIterations) {
          cpu_relax();
          continue;
        }
        std::unique_lock<std::mutex> lk(mu);
        wake.wait(lk, [&] { return stop.load() || generation.load() != seen; });
      }
      if (stop.load()) return;
      seen = generation.load(std::memory_order_acquire);
      run_chunks();
    }
  }
};

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(default_num_threads());
  return pool;
}

ThreadPool::ThreadPool(int num_threads) : impl_(new Impl), num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) impl_->workers.emplace_back([this] { impl_->worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stop.store(true);
  }
  impl_->wake.notify_all();
  for (auto& t : impl_->workers) t.join();
  delete impl_;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t max_chunks = (n + grain - 1) / grain;
  if (num_threads_ == 1 || max_chunks == 1 || t_inside_pool) {
    fn(0, n);
    return;
  }
  // Serialise concurrent callers from different user threads: one job at a time.
  static std::mutex submit_mu;
  std::lock_guard<std::mutex> submit(submit_mu);
  Impl& s = *impl_;
  // A few chunks per thread balance uneven work without much scheduling cost.
  const int64_t target = std::min<int64_t>(max_chunks, int64_t(num_threads_) * 4);
  s.job = &fn;
  s.n = n;
  s.chunk = (n + target - 1) / target;
  const int64_t count = (n + s.chunk - 1) / s.chunk;
  s.error = nullptr;
  s.finished.store(0, std::memory_order_relaxed);
  s.claim.store(uint64_t(count) << 32, std::memory_order_release);  // publishes the job fields above
  s.generation.fetch_add(1, std::memory_order_acq_rel);
  { std::lock_guard<std::mutex> lk(s.mu); }  // no worker can miss the wake-up below
  s.wake.notify_all();
  t_inside_pool = true;
  s.run_chunks();
  t_inside_pool = false;
  for (int spins = 0; s.finished.load(std::memory_order_acquire) != count; ++spins) {
    if (spins < kSpinIterations) {
      cpu_relax();
      continue;
    }
    std::unique_lock<std::mutex> lk(s.mu);
    s.done.wait(lk, [&] { return s.finished.load() == count; });
  }
  s.job = nullptr;
  if (s.error) std::rethrow_exception(s.error);
}

}  // namespace mb
