#include "ops/linear.h"

#include "backend/cpu/linear.h"
#include "backend/metal/linear.h"
#include "ops/check.h"

namespace mb::ops {

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
  if (bias) {
    c.rank(*bias, "bias", 1);
    c.dtype(*bias, "bias", {DType::F32, DType::BF16, DType::F16});
    c.contiguous(*bias, "bias");
    c.size(*bias, "bias", 0, N, "one value per row of w");
  }
  Shape out_shape = x.shape();
  out_shape.back() = N;
  c.output(out, "out", out_shape, x.dtype());
  c.no_alias(out, "out", x, "x");
  c.no_alias(out, "out", w, "w");
  if (bias) c.no_alias(out, "out", *bias, "bias");
  if (c.use_metal(ex)) {
    metal::KernelLauncher& L = metal::launcher_for(ex.device);
    metal::linear(L, x, w, bias, out);
    return;
  }
  c.device(ex);
  ex.reference ? cpu::linear_ref(x, w, bias, out) : cpu::linear_fast(x, w, bias, out);
}

}  // namespace mb::ops
