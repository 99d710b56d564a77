#include "ops/norm.h"

#include <cmath>

#include "ops/check.h"
#include "ops/run_op.h"

namespace mb::ops {
namespace {

// Exact in-place use is allowed (each row is read before it is written); any other overlap is not.
void check_inplace_or_disjoint(const Check& c, const Tensor& out, const Tensor& in, const char* name) {
  if (out.data() == in.data() && out.shape() == in.shape() && in.is_contiguous()) return;
  c.no_alias(out, "out", in, name);
}

// x: [..., D] float, contiguous, D ≥ 1. Returns D.
int64_t check_rows(const Check& c, const Tensor& x) {
  c.dtype(x, "x", {DType::F32, DType::BF16, DType::F16});
  if (x.dim() < 1) c.fail(cat("x must have at least 1 dimension [..., D], got ", x.describe()));
  c.contiguous(x, "x");
  if (x.size(-1) < 1) c.fail(cat("x ", x.describe(), ": the normalised (last) dimension must be ≥ 1"));
  return x.size(-1);
}

// An optional [D] parameter (weight / bias); undefined means absent.
void check_param(const Check& c, const Tensor& p, const char* name, int64_t D) {
  if (!p.defined()) return;
  c.dtype(p, name, {DType::F32, DType::BF16, DType::F16});
  c.rank(p, name, 1);
  c.size(p, name, 0, D, "the last dimension of x");
  c.contiguous(p, name);
}

void check_eps(const Check& c, float eps) {
  if (!(eps >= 0.f && std::isfinite(eps))) c.fail(cat("eps must be finite and ≥ 0, got ", eps));
}

}  // namespace

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out, const Exec& ex) {
  Check c{"rms_norm"};
  const int64_t D = check_rows(c, x);
  check_param(c, weight, "weight", D);
  check_eps(c, eps);
  c.output(out, "out", x.shape(), x.dtype());
  check_inplace_or_disjoint(c, out, x, "x");
  c.no_alias(out, "out", weight, "weight");
  run_op(c.op, ex, {&x, &weight}, {&out}, [&](const Backend& b) { b.rms_norm(x, weight, eps, out); });
}

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out, const Exec& ex) {
  Check c{"layer_norm"};
  const int64_t D = check_rows(c, x);
  check_param(c, weight, "weight", D);
  check_param(c, bias, "bias", D);
  if (weight.defined() && bias.defined() && weight.dtype() != bias.dtype())
    c.fail(cat("bias has dtype ", dtype_name(bias.dtype()), " but weight has ", dtype_name(weight.dtype()),
               "; they must match"));
  check_eps(c, eps);
  c.output(out, "out", x.shape(), x.dtype());
  check_inplace_or_disjoint(c, out, x, "x");
  c.no_alias(out, "out", weight, "weight");
  c.no_alias(out, "out", bias, "bias");
  run_op(c.op, ex, {&x, &weight, &bias}, {&out}, [&](const Backend& b) { b.layer_norm(x, weight, bias, eps, out); });
}

}  // namespace mb::ops
