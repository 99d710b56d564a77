#include "ops/linear.h"

#include "ops/check.h"
#include "ops/run_op.h"

namespace mb::ops {

LinearParams linear_params(const Exec& ex) {
  LinearParams p;
  p.bf16_products = ex.bf16_products;
  p.row_invariant = ex.row_invariant;
  return p;
}

void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out, const Exec& ex) {
  Check c{"linear"};
  c.dtype(x, "x", {DType::F32, DType::BF16});
  if (x.dim() < 1) c.fail(cat("x must have at least 1 dimension [..., K], got ", x.describe()));
  c.contiguous(x, "x");
  c.rank(w, "w", 2);
  c.dtype(w, "w", {DType::F32, DType::BF16, DType::F16});
  c.contiguous(w, "w");
  const int64_t K = x.size(-1), N = w.size(0);
  if (w.size(1) != K) c.fail(cat("w ", w.describe(), " must be [N, K] with K = ", K, " (the last dimension of x ", x.describe(), ")"));
  c.linear_bias(bias, N);
  Shape out_shape = x.shape();
  out_shape.back() = N;
  c.output(out, "out", out_shape, x.dtype());
  c.no_alias(out, "out", x, "x");
  c.no_alias(out, "out", w, "w");
  if (bias) c.no_alias(out, "out", *bias, "bias");
  run_op(c.op, ex, {&x, &w, bias}, {&out}, [&](const Backend& b) { b.linear(x, w, bias, out, linear_params(ex)); });
}

void linear_gathered(const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out, const Exec& ex) {
  Check c{"linear_gathered"};
  c.rank(x, "x", 2);
  c.dtype(x, "x", {DType::F32});
  c.contiguous(x, "x");
  c.rank(w, "w", 3);
  c.dtype(w, "w", {DType::F32, DType::BF16, DType::F16});
  c.contiguous(w, "w");
  c.rank(ids, "ids", 1);
  c.dtype(ids, "ids", {DType::I32});
  c.contiguous(ids, "ids");
  const int64_t R = x.size(0), K = x.size(1), E = w.size(0), N = w.size(1);
  if (w.size(2) != K) c.fail(cat("w ", w.describe(), " must be [E, N, K] with K = ", K, " (the last dimension of x ", x.describe(), ")"));
  if (E < 1) c.fail(cat("w ", w.describe(), " holds no matrices"));
  c.size(ids, "ids", 0, R, "one matrix index per row of x");
  c.output(out, "out", {R, N}, DType::F32);
  c.no_alias(out, "out", x, "x");
  c.no_alias(out, "out", w, "w");
  c.no_alias(out, "out", ids, "ids");
  run_op(c.op, ex, {&x, &w, &ids}, {&out}, [&](const Backend& b) {
    // A deferred backend's ids may still be in flight: its kernel writes a zero row for a bad one instead.
    if (!b.deferred()) c.indices_in_range(ids, "ids", E, "w's matrices");
    b.linear_gathered(x, w, ids, out, linear_params(ex));
  });
}

}  // namespace mb::ops
