// A persistent pool of worker threads. parallel_for splits [0, n) into chunks; the calling thread
// works too. Size: MARKBASE_NUM_THREADS if set, else every core. Nested calls run serially.
#pragma once
#include <cstdint>
#include "core/function_ref.h"

namespace mb {

class ThreadPool {
 public:
  // The process-wide pool.
  static ThreadPool& global();
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  // Runs fn(begin, end) over chunks of at least `grain` items covering [0, n); returns when all ran.
  void parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn);

 private:
  struct Impl;
  Impl* impl_;
  int num_threads_;
};

// Threads requested by the environment (MARKBASE_NUM_THREADS) or the core count.
int default_num_threads();

inline void parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  ThreadPool::global().parallel_for(n, grain, fn);
}

}  // namespace mb
