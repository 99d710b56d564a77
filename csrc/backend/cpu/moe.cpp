#include "backend/cpu/moe.h"

#include <algorithm>
#include <cstdint>

#include "core/thread_pool.h"

namespace mb::cpu {

namespace {

// Rows [t0, t1) of route_weights: the sum in j order, then w / sum · scale[id], then the row sorted by
// id (insertion sort: K is small). Every input element of a row is read before its output is written.
void route_rows(const float* w, const int32_t* ids, const float* scale, float* out_w, int32_t* out_ids, int64_t K,
                int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t row = t * K;
    float sum = 0.f;
    for (int64_t j = 0; j < K; ++j) sum += w[row + j];
    for (int64_t j = 0; j < K; ++j) {
      const int32_t e = ids[row + j];
      out_w[row + j] = w[row + j] / sum * scale[e];
      out_ids[row + j] = e;
    }
    for (int64_t j = 1; j < K; ++j) {
      const float v = out_w[row + j];
      const int32_t e = out_ids[row + j];
      int64_t i = j;
      for (; i > 0 && out_ids[row + i - 1] > e; --i) {
        out_w[row + i] = out_w[row + i - 1];
        out_ids[row + i] = out_ids[row + i - 1];
      }
      out_w[row + i] = v;
      out_ids[row + i] = e;
    }
  }
}

// Columns [c0, c1) of index_add over every row i in order.
void add_columns(float* out, const int32_t* index, const float* src, const float* weight, int64_t n, int64_t D,
                 int64_t c0, int64_t c1) {
  for (int64_t i = 0; i < n; ++i) {
    float* dst = out + int64_t(index[i]) * D;
    const float* row = src + i * D;
    if (weight) {
      const float wv = weight[i];
      for (int64_t c = c0; c < c1; ++c) {
        const float product = row[c] * wv;  // rounded to f32 before the add
        dst[c] += product;
      }
    } else {
      for (int64_t c = c0; c < c1; ++c) dst[c] += row[c];
    }
  }
}

}  // namespace

void route_weights_ref(const Tensor& w, const Tensor& ids, const Tensor& scale, Tensor& out_w, Tensor& out_ids) {
  route_rows(w.data_as<const float>(), ids.data_as<const int32_t>(), scale.data_as<const float>(), out_w.data_as<float>(),
             out_ids.data_as<int32_t>(), w.size(1), 0, w.size(0));
}

void route_weights_fast(const Tensor& w, const Tensor& ids, const Tensor& scale, Tensor& out_w, Tensor& out_ids) {
  const int64_t K = w.size(1);
  parallel_for(w.size(0), std::max<int64_t>(1, 4096 / std::max<int64_t>(K, 1)), [&](int64_t t0, int64_t t1) {
    route_rows(w.data_as<const float>(), ids.data_as<const int32_t>(), scale.data_as<const float>(),
               out_w.data_as<float>(), out_ids.data_as<int32_t>(), K, t0, t1);
  });
}

void index_add_ref(Tensor& out, const Tensor& index, const Tensor& src, const Tensor* weight) {
  add_columns(out.data_as<float>(), index.data_as<const int32_t>(), src.data_as<const float>(),
              weight ? weight->data_as<const float>() : nullptr, index.size(0), out.size(1), 0, out.size(1));
}

void index_add_fast(Tensor& out, const Tensor& index, const Tensor& src, const Tensor* weight) {
  const int64_t n = index.size(0), D = out.size(1);
  // Column blocks of 64 floats: whole cache lines, and every block sees the rows in index order.
  const int64_t blocks = (D + 63) / 64;
  parallel_for(blocks, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)), [&](int64_t b0, int64_t b1) {
    add_columns(out.data_as<float>(), index.data_as<const int32_t>(), src.data_as<const float>(),
                weight ? weight->data_as<const float>() : nullptr, n, D, b0 * 64, std::min(D, b1 * 64));
  });
}

}  // namespace mb::cpu
