#include "ops/topk.h"

#include <limits>

#include "backend/cpu/topk.h"
#include "backend/metal/topk.h"
#include "ops/check.h"

namespace mb::ops {

void topk(const Tensor& x, int64_t k, Tensor& values, Tensor& indices, const Exec& ex) {
  Check c{"topk"};
  c.rank(x, "x", 2);
  c.dtype(x, "x", {DType::F32});
  c.contiguous(x, "x");
  const int64_t R = x.size(0), N = x.size(1);
  if (k < 1 || k > N) c.fail(cat("k must satisfy 1 <= k <= N = ", N, " (x ", x.describe(), "), got k = ", k));
  if (N > std::numeric_limits<int32_t>::max()) c.fail(cat("x ", x.describe(), " has too many columns for i32 indices"));
  c.output(values, "values", {R, k}, DType::F32);
  c.output(indices, "indices", {R, k}, DType::I32);
  c.no_alias(values, "values", x, "x");
  c.no_alias(indices, "indices", x, "x");
  c.no_alias(indices, "indices", values, "values");
  if (c.use_metal(ex)) {
    metal::KernelLauncher& L = metal::launcher_for(ex.device);
    metal::topk(L, x, k, values, indices);
    return;
  }
  c.device(ex);
  ex.reference ? cpu::topk_ref(x, k, values, indices) : cpu::topk_fast(x, k, values, indices);
}

}  // namespace mb::ops
