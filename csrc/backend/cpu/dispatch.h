// Turns a runtime float dtype into a compile-time storage type: dispatch_float(t, [&](auto tag) {
//   using T = decltype(tag); ... load_f32(ptr<T>) ... }).
#pragma once
#include "core/dtype.h"
#include "core/errors.h"

namespace mb::cpu {

template <class F>
decltype(auto) dispatch_float(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::BF16: return f(bf16_t{});
    case DType::F16: return f(f16_t{});
    default: throw InputError(cat("internal: no float kernel for dtype ", dtype_name(t)));
  }
}

// Elements per parallel chunk for cheap elementwise work: below this, threading costs more than it saves.
constexpr int64_t kElementwiseGrain = 1 << 14;

}  // namespace mb::cpu
