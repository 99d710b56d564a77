// linear_gathered kernels: every row of x through the matrix its id selects, built on the dense
// linear kernels (backend/cpu/linear.cpp) applied to views.
#include <cstring>
#include <vector>

#include "backend/cpu/linear.h"

namespace mb::cpu {

void linear_gathered_ref(const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out) {
  const int32_t* id = ids.data_as<const int32_t>();
  for (int64_t r = 0; r < x.size(0); ++r) {
    Tensor out_row = out.slice(0, r, r + 1);
    linear_ref(x.slice(0, r, r + 1), w.select(0, id[r]), nullptr, out_row);
  }
}

void linear_gathered_fast(const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out,
                          const ops::LinearParams& p) {
  const int64_t R = x.size(0), K = x.size(1), E = w.size(0), N = w.size(1);
  const int32_t* id = ids.data_as<const int32_t>();
  // rows of matrix e: order[start[e] .. start[e + 1]), increasing (a counting sort). The buffers belong to
  // the calling thread and only grow, so a decode step allocates nothing.
  thread_local std::vector<int64_t> start, next, order;
  thread_local std::vector<float> xs_buf, ys_buf;
  start.assign(size_t(E) + 1, 0);
  order.resize(size_t(R));
  for (int64_t r = 0; r < R; ++r) ++start[size_t(id[r]) + 1];
  for (int64_t e = 0; e < E; ++e) start[size_t(e) + 1] += start[size_t(e)];
  next.assign(start.begin(), start.end() - 1);
  for (int64_t r = 0; r < R; ++r) order[size_t(next[size_t(id[r])]++)] = r;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t* rows = order.data() + start[size_t(e)];
    const int64_t n = start[size_t(e) + 1] - start[size_t(e)];
    if (n == 0) continue;
    if (n == 1) {  // decode: each expert serves one row, which is already a [1, K] view
      Tensor out_row = out.slice(0, rows[0], rows[0] + 1);
      linear_fast(x.slice(0, rows[0], rows[0] + 1), w.select(0, e), nullptr, out_row, p);
      continue;
    }
    // [n, K] gathered rows -> one dense linear over matrix e -> scattered back.
    xs_buf.resize(size_t(R * K));
    ys_buf.resize(size_t(R * N));
    Tensor xs = Tensor::wrap_contiguous(xs_buf.data(), DType::F32, {n, K}, nullptr, StorageKind::External);
    Tensor y = Tensor::wrap_contiguous(ys_buf.data(), DType::F32, {n, N}, nullptr, StorageKind::External);
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(xs.data_as<float>() + i * K, x.data_as<const float>() + rows[i] * K, size_t(K) * sizeof(float));
    linear_fast(xs, w.select(0, e), nullptr, y, p);
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(out.data_as<float>() + rows[i] * N, y.data_as<const float>() + i * N, size_t(N) * sizeof(float));
  }
}

}  // namespace mb::cpu
