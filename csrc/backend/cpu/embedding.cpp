// Embedding kernels: out[t, :] = f32(table[ids[t], :]) * scale, one f32 multiply per element and one
// rounding to out's dtype, so the reference and fast kernels agree bit for bit. Only looked-up rows of
// the table are read.
#include "backend/cpu/embedding.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "core/file_map.h"
#include "core/thread_pool.h"

namespace mb::cpu {

namespace {

int64_t id_at(const Tensor& ids, int64_t t) {
  return ids.dtype() == DType::I32 ? int64_t(ids.data_as<const int32_t>()[t]) : ids.data_as<const int64_t>()[t];
}

// Calls f(table_tag, out_tag) with the storage types of table and out.
template <class F>
void dispatch_table_out(const Tensor& table, const Tensor& out, F&& f) {
  dispatch_float(table.dtype(), [&](auto tt) {
    if (out.dtype() == DType::F32) f(tt, float{});
    else f(tt, bf16_t{});
  });
}

}  // namespace

void embedding_ref(const Tensor& table, const Tensor& ids, Tensor& out, float scale) {
  const int64_t D = table.size(1), T = ids.size(0);
  dispatch_table_out(table, out, [&](auto ttag, auto otag) {
    using TT = decltype(ttag);
    using OT = decltype(otag);
    const TT* tab = table.data_as<const TT>();
    OT* ys = out.data_as<OT>();
    for (int64_t t = 0; t < T; ++t) {
      const TT* row = tab + id_at(ids, t) * D;
      for (int64_t d = 0; d < D; ++d) store_f32(ys + t * D + d, load_f32(row + d) * scale);
    }
  });
}

void embedding_fast(const Tensor& table, const Tensor& ids, Tensor& out, float scale) {
  const int64_t D = table.size(1), T = ids.size(0);
  if (T == 0 || D == 0) return;
  // A table in a mapped checkpoint (the PLE table) is read a row at a time with pread(): never mapped, so
  // the resident set does not grow by a page-cache folio per distinct token (core/file_map.h).
  dispatch_table_out(table, out, [&](auto ttag, auto otag) {
    using TT = decltype(ttag);
    using OT = decltype(otag);
    const TableRows rows(table.data(), size_t(D) * sizeof(TT));
    OT* ys = out.data_as<OT>();
    parallel_for(T, std::max<int64_t>(1, kElementwiseGrain / D), [&](int64_t t0, int64_t t1) {
      float tile[256];  // f32 staging so the convert and scale loops stay simple and vectorisable
      thread_local std::vector<uint8_t> row_buf;  // a row read from the file; grows once, reused by later calls
      for (int64_t t = t0; t < t1; ++t) {
        const TT* row = reinterpret_cast<const TT*>(rows.row(id_at(ids, t), row_buf));
        OT* y = ys + t * D;
        for (int64_t s = 0; s < D; s += 256) {
          const int64_t n = std::min<int64_t>(256, D - s);
          for (int64_t i = 0; i < n; ++i) tile[i] = load_f32(row + s + i) * scale;
          for (int64_t i = 0; i < n; ++i) store_f32(y + s + i, tile[i]);
        }
      }
    });
  });
}

}  // namespace mb::cpu
