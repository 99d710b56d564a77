#include "ops/conv.h"

#include "ops/check.h"
#include "ops/run_op.h"

namespace mb::ops {

int64_t conv_out_size(int64_t n, int64_t k, int64_t stride, int64_t pad) {
  int64_t span = n + 2 * pad - k;
  return span < 0 ? 0 : span / stride + 1;
}

void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, const Conv2dParams& p,
            const Exec& ex) {
  Check c{"conv2d"};
  c.rank(x, "x", 4);
  c.dtype(x, "x", {DType::F32});
  c.contiguous(x, "x");
  c.rank(w, "w", 4);
  c.dtype(w, "w", {DType::F32, DType::BF16, DType::F16});
  c.contiguous(w, "w");
  c.size(w, "w", 1, x.size(1), "input channels of x");
  if (p.stride_h < 1 || p.stride_w < 1) c.fail(cat("stride must be >= 1, got (", p.stride_h, ", ", p.stride_w, ")"));
  if (p.pad_h < 0 || p.pad_w < 0) c.fail(cat("padding must be >= 0, got (", p.pad_h, ", ", p.pad_w, ")"));
  const int64_t kh = w.size(2), kw = w.size(3);
  if (kh < 1 || kw < 1) c.fail(cat("w ", w.describe(), " has an empty kernel"));
  if (x.size(2) + 2 * p.pad_h < kh || x.size(3) + 2 * p.pad_w < kw)
    c.fail(cat("x ", x.describe(), " padded by (", p.pad_h, ", ", p.pad_w, ") is smaller than the ", kh, "x", kw, " kernel"));
  if (bias.defined()) {
    c.rank(bias, "bias", 1);
    c.dtype(bias, "bias", {DType::F32, DType::BF16, DType::F16});
    c.contiguous(bias, "bias");
    c.size(bias, "bias", 0, w.size(0), "output channels of w");
  }
  const Shape out_shape{x.size(0), w.size(0), conv_out_size(x.size(2), kh, p.stride_h, p.pad_h),
                        conv_out_size(x.size(3), kw, p.stride_w, p.pad_w)};
  c.output(out, "out", out_shape, DType::F32);
  c.no_alias(out, "out", x, "x");
  c.no_alias(out, "out", w, "w");
  if (bias.defined()) c.no_alias(out, "out", bias, "bias");
  run_op(c.op, ex, {&x, &w, &bias}, {&out}, [&](const Backend& b) { b.conv2d(x, w, bias, out, p); });
}

void depthwise_conv1d_causal(const Tensor& x, const Tensor& w, Tensor& out, const Exec& ex) {
  Check c{"depthwise_conv1d_causal"};
  c.rank(x, "x", 2);
  c.dtype(x, "x", {DType::F32});
  c.contiguous(x, "x");
  c.rank(w, "w", 3);
  c.dtype(w, "w", {DType::F32, DType::BF16, DType::F16});
  c.contiguous(w, "w");
  c.size(w, "w", 0, x.size(1), "channels of x");
  c.size(w, "w", 1, 1, "one input channel per group");
  if (w.size(2) < 1) c.fail(cat("w ", w.describe(), " has an empty kernel"));
  c.output(out, "out", x.shape(), DType::F32);
  c.no_alias(out, "out", x, "x");
  c.no_alias(out, "out", w, "w");
  run_op(c.op, ex, {&x, &w}, {&out}, [&](const Backend& b) { b.depthwise_conv1d_causal(x, w, out); });
}

}  // namespace mb::ops
