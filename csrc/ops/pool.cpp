#include "ops/pool.h"

#include <cmath>

#include "ops/check.h"
#include "ops/run_op.h"

namespace mb::ops {

void avg_pool_indexed(const Tensor& x, const Tensor& index, int64_t num_out, float divisor, Tensor& out,
                      const Exec& ex) {
  Check c{"avg_pool_indexed"};
  c.rank(x, "x", 2);
  c.dtype(x, "x", {DType::F32});
  c.contiguous(x, "x");
  c.rank(index, "index", 1);
  c.dtype(index, "index", {DType::I32});
  c.contiguous(index, "index");
  c.size(index, "index", 0, x.size(0), "one entry per row of x");
  if (num_out < 0) c.fail(cat("num_out must be >= 0, got ", num_out));
  if (!std::isfinite(divisor) || divisor == 0.f) c.fail(cat("divisor must be finite and non-zero, got ", divisor));
  // Every kernel trusts the indices, so an out-of-range one is caught here, by value and position.
  const int32_t* idx = index.data_as<const int32_t>();
  for (int64_t n = 0; n < index.numel(); ++n)
    if (idx[n] < -1 || idx[n] >= num_out)
      c.fail(cat("index[", n, "] = ", idx[n], " is out of range [-1, ", num_out, ")"));
  c.output(out, "out", {num_out, x.size(1)}, DType::F32);
  c.no_alias(out, "out", x, "x");
  c.no_alias(out, "out", index, "index");
  run_op(c.op, ex, {&x, &index}, {&out}, [&](const Backend& b) { b.avg_pool_indexed(x, index, divisor, out); });
}

}  // namespace mb::ops
