#include "ops/elementwise.h"

#include <cmath>

#include "ops/check.h"
#include "ops/run_op.h"

namespace mb::ops {

// Exact in-place use is allowed; any other overlap is rejected.
static void check_inplace_or_disjoint(const Check& c, const Tensor& out, const Tensor& in, const char* name) {
  if (out.data() == in.data() && out.shape() == in.shape() && in.is_contiguous()) return;
  c.no_alias(out, "out", in, name);
}

void unary(const Tensor& x, Tensor& out, const UnaryParams& p, const Exec& ex) {
  Check c{unary_name(p.kind)};
  c.dtype(x, "x", {DType::F32, DType::BF16, DType::F16});
  c.contiguous(x, "x");
  c.output(out, "out", x.shape(), x.dtype());
  check_inplace_or_disjoint(c, out, x, "x");
  if (p.kind == UnaryKind::Softcap && !(p.a > 0.f && std::isfinite(p.a))) c.fail(cat("cap must be finite and > 0, got ", p.a));
  if (p.kind == UnaryKind::Clamp && (std::isnan(p.a) || std::isnan(p.b) || p.a > p.b))
    c.fail(cat("bounds must satisfy lo <= hi, got [", p.a, ", ", p.b, "]"));
  if (p.kind == UnaryKind::Scale && !std::isfinite(p.a)) c.fail(cat("factor must be finite, got ", p.a));
  run_op(c.op, ex, {&x}, {&out}, [&](const Backend& b) { b.unary(x, out, p); });
}

void binary(const Tensor& a, const Tensor& b, Tensor& out, BinaryKind kind, const Exec& ex) {
  Check c{kind == BinaryKind::Add ? "add" : "mul"};
  c.dtype(a, "a", {DType::F32, DType::BF16, DType::F16});
  c.dtype(b, "b", {a.dtype()});
  c.contiguous(a, "a");
  c.contiguous(b, "b");
  bool broadcast_ok = b.numel() == 1 || b.shape() == a.shape();
  if (!broadcast_ok && b.dim() <= a.dim()) {
    broadcast_ok = true;
    for (int64_t i = 1; i <= b.dim(); ++i)
      if (b.size(-i) != a.size(-i)) broadcast_ok = false;
  }
  if (!broadcast_ok) c.fail(cat("b ", b.describe(), " does not broadcast to a ", a.describe(), " (same shape, trailing dims or one element)"));
  c.output(out, "out", a.shape(), a.dtype());
  check_inplace_or_disjoint(c, out, a, "a");
  c.no_alias(out, "out", b, "b");
  run_op(c.op, ex, {&a, &b}, {&out}, [&](const Backend& be) { be.binary(a, b, out, kind); });
}

}  // namespace mb::ops
