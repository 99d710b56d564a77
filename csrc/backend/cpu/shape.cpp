// Copy and concat kernels. Reference: mb::copy_into's scalar strided walk. Fast: merge the dimensions
// both sides walk linearly, then copy the innermost run per row (memcpy when both are dense), with
// rows (or one long run) spread over the pool. Conversions use the same scalar rounding functions as
// the reference, so both produce identical bits.
#include "backend/cpu/shape.h"

#include <algorithm>
#include <cstring>

#include "backend/copy_layout.h"
#include "backend/cpu/dispatch.h"
#include "core/errors.h"
#include "core/thread_pool.h"

namespace mb::cpu {

namespace {

// Concat as copies: each tensor into its slice of out along dim, with `copy` (the reference or the fast one).
void concat_by_copies(const std::vector<Tensor>& tensors, int64_t dim, Tensor& out,
                      void (*copy)(const Tensor& src, Tensor& dst)) {
  int64_t off = 0;
  for (const Tensor& t : tensors) {
    Tensor part = out.slice(dim, off, off + t.size(dim));
    copy(t, part);
    off += t.size(dim);
  }
}

}  // namespace

void copy_ref(const Tensor& src, Tensor& dst) { copy_into(src, dst); }

void concat_ref(const std::vector<Tensor>& tensors, int64_t dim, Tensor& out) {
  concat_by_copies(tensors, dim, out, copy_ref);
}

namespace {

// Elements per parallel chunk: copying is memory bound, so only large copies are worth splitting.
constexpr int64_t kCopyGrain = int64_t(1) << 16;

// Copies one run of n elements: src step ss, dst step ds (in elements).
using RowFn = void (*)(const char* s, char* d, int64_t n, int64_t ss, int64_t ds);

template <class U>
void raw_row(const char* s, char* d, int64_t n, int64_t ss, int64_t ds) {
  if (ss == 1 && ds == 1) {
    std::memcpy(d, s, size_t(n) * sizeof(U));
    return;
  }
  const U* a = reinterpret_cast<const U*>(s);
  U* b = reinterpret_cast<U*>(d);
  for (int64_t k = 0; k < n; ++k) b[k * ds] = a[k * ss];
}

template <class S, class D>
void convert_row(const char* s, char* d, int64_t n, int64_t ss, int64_t ds) {
  const S* a = reinterpret_cast<const S*>(s);
  D* b = reinterpret_cast<D*>(d);
  for (int64_t k = 0; k < n; ++k) store_f32(b + k * ds, load_f32(a + k * ss));
}

RowFn pick_row(DType from, DType to) {
  if (from == to) {
    switch (dtype_itemsize(from)) {
      case 1: return raw_row<uint8_t>;
      case 2: return raw_row<uint16_t>;
      case 4: return raw_row<uint32_t>;
      case 8: return raw_row<uint64_t>;
      default: throw InputError(cat("internal: copy has no kernel for dtype ", dtype_name(from)));
    }
  }
  return dispatch_float(from, [&](auto s_tag) -> RowFn {
    using S = decltype(s_tag);
    return dispatch_float(to, [&](auto d_tag) -> RowFn {
      using D = decltype(d_tag);
      return convert_row<S, D>;
    });
  });
}

}  // namespace

void copy_fast(const Tensor& src, Tensor& dst) {
  if (src.numel() == 0) return;
  const CopyLayout L = coalesce(src, dst);
  const RowFn row = pick_row(src.dtype(), dst.dtype());
  const int64_t si = int64_t(dtype_itemsize(src.dtype())), di = int64_t(dtype_itemsize(dst.dtype()));
  const char* s0 = static_cast<const char*>(src.data());
  char* d0 = static_cast<char*>(dst.data());
  const int64_t outer_rank = int64_t(L.shape.size()) - 1;
  const int64_t inner = L.shape.back(), iss = L.ss.back(), ids = L.ds.back();
  int64_t rows = 1;
  for (int64_t k = 0; k < outer_rank; ++k) rows *= L.shape[size_t(k)];

  if (rows == 1) {  // one long run: split the run itself
    parallel_for(inner, kCopyGrain, [&](int64_t b, int64_t e) {
      row(s0 + b * iss * si, d0 + b * ids * di, e - b, iss, ids);
    });
    return;
  }
  parallel_for(rows, std::max<int64_t>(1, kCopyGrain / inner), [&](int64_t r0, int64_t r1) {
    // Unravel r0 over the outer dimensions once, then step an odometer row by row.
    Dims idx(size_t(outer_rank), 0);
    int64_t so = 0, dof = 0;
    for (int64_t k = outer_rank - 1, r = r0; k >= 0; --k) {
      const size_t u = size_t(k);
      idx[u] = r % L.shape[u];
      r /= L.shape[u];
      so += idx[u] * L.ss[u];
      dof += idx[u] * L.ds[u];
    }
    for (int64_t r = r0; r < r1; ++r) {
      row(s0 + so * si, d0 + dof * di, inner, iss, ids);
      for (int64_t k = outer_rank - 1; k >= 0; --k) {
        const size_t u = size_t(k);
        if (++idx[u] < L.shape[u]) {
          so += L.ss[u];
          dof += L.ds[u];
          break;
        }
        so -= L.ss[u] * (L.shape[u] - 1);
        dof -= L.ds[u] * (L.shape[u] - 1);
        idx[u] = 0;
      }
    }
  });
}

void concat_fast(const std::vector<Tensor>& tensors, int64_t dim, Tensor& out) {
  concat_by_copies(tensors, dim, out, copy_fast);
}

}  // namespace mb::cpu
