#include "ops/softmax.h"

#include "ops/check.h"
#include "ops/run_op.h"

namespace mb::ops {

void softmax(const Tensor& x, Tensor& out, const Exec& ex) {
  Check c{"softmax"};
  c.dtype(x, "x", {DType::F32, DType::BF16, DType::F16});
  if (x.dim() < 1) c.fail(cat("x must have at least 1 dimension [..., D], got ", x.describe()));
  c.contiguous(x, "x");
  if (x.size(-1) < 1) c.fail(cat("x ", x.describe(), ": the softmax (last) dimension must be ≥ 1"));
  c.output(out, "out", x.shape(), x.dtype());
  // Exact in-place use is allowed (each row is read before it is written).
  if (!(out.data() == x.data() && out.shape() == x.shape())) c.no_alias(out, "out", x, "x");
  run_op(c.op, ex, {&x}, {&out}, [&](const Backend& b) { b.softmax(x, out); });
}

}  // namespace mb::ops
