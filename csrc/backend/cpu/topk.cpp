// Top-k kernels. Both use the same total order (topk_before), so they agree exactly.
#include "backend/cpu/topk.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/thread_pool.h"

namespace mb::cpu {

void topk_ref(const Tensor& x, int64_t k, Tensor& values, Tensor& indices) {
  const int64_t R = x.size(0), N = x.size(1);
  const float* xs = x.data_as<const float>();
  float* vs = values.data_as<float>();
  int32_t* is = indices.data_as<int32_t>();
  std::vector<int64_t> order(static_cast<size_t>(N));
  for (int64_t r = 0; r < R; ++r) {
    const float* row = xs + r * N;
    std::iota(order.begin(), order.end(), int64_t(0));
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return topk_before(row[a], a, row[b], b); });
    for (int64_t j = 0; j < k; ++j) {
      vs[r * k + j] = row[order[size_t(j)]];
      is[r * k + j] = int32_t(order[size_t(j)]);
    }
  }
}

namespace {

// Up to this k, keep a sorted list of the best k seen so far: most elements of a long row are rejected
// by a single comparison with the current k-th best.
constexpr int64_t kInsertionMaxK = 64;

// row: [N] -> vals/idx: [k], sorted by topk_before.
void topk_row_insertion(const float* row, int64_t N, int64_t k, float* vals, int32_t* idx) {
  int64_t filled = 0;
  for (int64_t i = 0; i < N; ++i) {
    const float v = row[i];
    // Indices increase along the scan, so a newcomer never passes an equal value already kept.
    if (filled == k && !topk_before(v, i, vals[k - 1], idx[k - 1])) continue;
    int64_t pos = filled < k ? filled++ : k - 1;
    while (pos > 0 && topk_before(v, i, vals[pos - 1], idx[pos - 1])) {
      vals[pos] = vals[pos - 1];
      idx[pos] = idx[pos - 1];
      --pos;
    }
    vals[pos] = v;
    idx[pos] = int32_t(i);
  }
}

void topk_row_partial_sort(const float* row, int64_t N, int64_t k, std::vector<int32_t>& order, float* vals, int32_t* idx) {
  order.resize(size_t(N));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return topk_before(row[a], a, row[b], b); });
  for (int64_t j = 0; j < k; ++j) {
    idx[j] = order[size_t(j)];
    vals[j] = row[order[size_t(j)]];
  }
}

}  // namespace

void topk_fast(const Tensor& x, int64_t k, Tensor& values, Tensor& indices) {
  const int64_t R = x.size(0), N = x.size(1);
  const float* xs = x.data_as<const float>();
  float* vs = values.data_as<float>();
  int32_t* is = indices.data_as<int32_t>();
  parallel_for(R, std::max<int64_t>(1, (1 << 14) / N), [&](int64_t r0, int64_t r1) {
    std::vector<int32_t> order;
    for (int64_t r = r0; r < r1; ++r) {
      if (k <= kInsertionMaxK) topk_row_insertion(xs + r * N, N, k, vs + r * k, is + r * k);
      else topk_row_partial_sort(xs + r * N, N, k, order, vs + r * k, is + r * k);
    }
  });
}

}  // namespace mb::cpu
