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

void linear_gathered_fast(const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out) {
  const int64_t R = x.size(0), K = x.size(1), E = w.size(0), N = w.size(1);
  const int32_t* id = ids.data_as<const int32_t>();
  // rows_of[e]: the rows using matrix e, in increasing order.
  std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(E));
  for (int64_t r = 0; r < R; ++r) rows_of[size_t(id[r])].push_back(r);
  Tensor xs, ys;  // gather / scatter buffers, only needed when a matrix serves several rows
  for (int64_t e = 0; e < E; ++e) {
    const std::vector<int64_t>& rows = rows_of[size_t(e)];
    if (rows.empty()) continue;
    const int64_t n = int64_t(rows.size());
    if (n == 1) {  // decode: each expert serves one row, which is already a [1, K] view
      Tensor out_row = out.slice(0, rows[0], rows[0] + 1);
      linear_fast(x.slice(0, rows[0], rows[0] + 1), w.select(0, e), nullptr, out_row);
      continue;
    }
    if (!xs.defined()) {
      xs = Tensor::empty(DType::F32, {R, K});
      ys = Tensor::empty(DType::F32, {R, N});
    }
    // [n, K] gathered rows -> one dense linear over matrix e -> scattered back.
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(xs.data_as<float>() + i * K, x.data_as<const float>() + rows[size_t(i)] * K, size_t(K) * sizeof(float));
    Tensor y = ys.slice(0, 0, n);
    linear_fast(xs.slice(0, 0, n), w.select(0, e), nullptr, y);
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(out.data_as<float>() + rows[size_t(i)] * N, y.data_as<const float>() + i * N, size_t(N) * sizeof(float));
  }
}

}  // namespace mb::cpu
