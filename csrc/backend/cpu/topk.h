// CPU kernels for ops/topk.h. Arguments are validated by the front door.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/tensor.h"

namespace mb::cpu {

// Sorts all N indices of each row with topk_before, keeps the first k.
void topk_ref(const Tensor& x, int64_t k, Tensor& values, Tensor& indices);
// Small k: one pass keeping a sorted list of the best k; large k: partial sort. Rows over the pool.
void topk_fast(const Tensor& x, int64_t k, Tensor& values, Tensor& indices);

// The strict total order of topk: (a at index ia) comes before (b at index ib).
// NaN first, then larger values, then (for equal values or two NaNs) the lower index.
inline bool topk_before(float a, int64_t ia, float b, int64_t ib) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na != nb) return na;
  if (!na && a != b) return a > b;
  return ia < ib;
}

}  // namespace mb::cpu
