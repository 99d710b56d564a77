// Index-mapped average pooling. Reference: scatter-add every row in order, then divide. Fast: group the
// rows by output (a counting sort that keeps increasing n), then sum each output's rows in parallel.
// Both add the same rows in the same order and divide once, so they agree bit for bit.
#include "backend/cpu/pool.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "core/thread_pool.h"

namespace mb::cpu {

void avg_pool_indexed_ref(const Tensor& x, const Tensor& index, Tensor& out, float divisor) {
  const int64_t N = x.size(0), D = x.size(1), M = out.size(0);
  const float* xs = x.data_as<const float>();        // x: [N, D]
  const int32_t* idx = index.data_as<const int32_t>();  // index: [N], -1 = skip
  float* ys = out.data_as<float>();                   // out: [M, D]
  std::fill(ys, ys + M * D, 0.f);
  for (int64_t n = 0; n < N; ++n) {
    if (idx[n] < 0) continue;
    float* y = ys + int64_t(idx[n]) * D;
    for (int64_t d = 0; d < D; ++d) y[d] += xs[n * D + d];
  }
  for (int64_t i = 0; i < M * D; ++i) ys[i] = ys[i] / divisor;
}

void avg_pool_indexed_fast(const Tensor& x, const Tensor& index, Tensor& out, float divisor) {
  const int64_t N = x.size(0), D = x.size(1), M = out.size(0);
  const float* xs = x.data_as<const float>();
  const int32_t* idx = index.data_as<const int32_t>();
  float* ys = out.data_as<float>();
  // members[start[m] .. start[m+1]) = the rows n with index[n] == m, in increasing n.
  std::vector<int64_t> start(size_t(M) + 1, 0), members;
  for (int64_t n = 0; n < N; ++n)
    if (idx[n] >= 0) ++start[size_t(idx[n]) + 1];
  for (int64_t m = 0; m < M; ++m) start[size_t(m) + 1] += start[size_t(m)];
  members.resize(size_t(start[size_t(M)]));
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t n = 0; n < N; ++n)
      if (idx[n] >= 0) members[size_t(fill[size_t(idx[n])]++)] = n;
  }
  const int64_t per_row = std::max<int64_t>(D * (1 + N / std::max<int64_t>(M, 1)), 1);
  parallel_for(M, std::max<int64_t>(1, kElementwiseGrain / per_row), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      float* y = ys + m * D;
      std::fill(y, y + D, 0.f);
      for (int64_t k = start[size_t(m)]; k < start[size_t(m) + 1]; ++k) {
        const float* xr = xs + members[size_t(k)] * D;
        for (int64_t d = 0; d < D; ++d) y[d] += xr[d];
      }
      for (int64_t d = 0; d < D; ++d) y[d] = y[d] / divisor;
    }
  });
}

}  // namespace mb::cpu
