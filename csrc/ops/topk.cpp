#include "ops/topk.h"

#include <limits>

#include "ops/check.h"
#include "ops/run_op.h"

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
  run_op(c.op, ex, {&x}, {&values, &indices}, [&](const Backend& b) { b.topk(x, k, values, indices); });
}

}  // namespace mb::ops
