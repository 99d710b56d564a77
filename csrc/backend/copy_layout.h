// The index space of a strided copy, shared by every backend's copy kernel dispatch.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mb {

// src's index space with size-1 dimensions dropped and mergeable neighbours merged (d and d+1 merge
// when both sides step over d exactly as over a whole run of d+1). Strides in elements.
struct CopyLayout {
  Dims shape, ss, ds;  // element strides of src and dst (inline: no allocation per copy)
};

inline CopyLayout coalesce(const Tensor& src, const Tensor& dst) {
  CopyLayout L;
  for (int64_t d = 0; d < src.dim(); ++d) {
    if (src.size(d) == 1) continue;
    const int64_t n = src.size(d), s = src.stride(d), t = dst.stride(d);
    if (!L.shape.empty() && L.ss.back() == s * n && L.ds.back() == t * n) {
      L.shape.back() *= n;
      L.ss.back() = s;
      L.ds.back() = t;
    } else {
      L.shape.push_back(n);
      L.ss.push_back(s);
      L.ds.push_back(t);
    }
  }
  if (L.shape.empty()) L = {{1}, {1}, {1}};  // a single element
  return L;
}

}  // namespace mb
