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

struct ThreadPool::Impl {
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable wake, done;
  const std::function<void(int64_t, int64_t)>* job = nullptr;
  int64_t n = 0, chunk = 1, num_chunks = 0;
  std::atomic<int64_t> next{0};
  int active = 0;          // workers still inside the current job
  uint64_t generation = 0;  // bumped per job so workers see each job once
  bool stop = false;
  std::exception_ptr error;

  void run_chunks() {
    for (;;) {
      int64_t c = next.fetch_add(1);
      if (c >= num_chunks) return;
      int64_t b = c * chunk, e = std::min(n, b + chunk);
      try {
        (*job)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        if (!error) error = std::current_exception();
      }
    }
  }

  void worker_loop() {
    t_inside_pool = true;
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu);
        wake.wait(lk, [&] { return stop || generation != seen; });
        if (stop) return;
        seen = generation;
      }
      run_chunks();
      std::lock_guard<std::mutex> lk(mu);
      if (--active == 0) done.notify_one();
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
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  for (auto& t : impl_->workers) t.join();
  delete impl_;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
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
  int64_t target = std::min<int64_t>(max_chunks, int64_t(num_threads_) * 4);
  {
    std::lock_guard<std::mutex> lk(s.mu);
    s.job = &fn;
    s.n = n;
    s.chunk = (n + target - 1) / target;
    s.num_chunks = (n + s.chunk - 1) / s.chunk;
    s.next.store(0);
    s.error = nullptr;
    s.active = int(s.workers.size());
    ++s.generation;
  }
  s.wake.notify_all();
  t_inside_pool = true;
  s.run_chunks();
  t_inside_pool = false;
  std::unique_lock<std::mutex> lk(s.mu);
  s.done.wait(lk, [&] { return s.active == 0; });
  s.job = nullptr;
  if (s.error) std::rethrow_exception(s.error);
}

}  // namespace mb
