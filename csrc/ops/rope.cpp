#include "ops/rope.h"

#include <cmath>

#include "core/mutation.h"
#include "ops/check.h"
#include "ops/run_op.h"

namespace mb::ops {
namespace {

// Exact in-place use is allowed (each rotated pair is read before it is written); other overlap is not.
void check_inplace_or_disjoint(const Check& c, const Tensor& out, const Tensor& in, const char* name) {
  if (out.data() == in.data() && out.shape() == in.shape() && in.is_contiguous()) return;
  c.no_alias(out, "out", in, name);
}

// x: [T, H, d] float with a contiguous last dimension.
void check_heads(const Check& c, const Tensor& x) {
  c.dtype(x, "x", {DType::F32, DType::BF16, DType::F16});
  c.rank(x, "x", 3);
  c.inner_contiguous(x, "x");
}

// f32 θ^e for an f32 exponent, as torch's `base ** tensor` on float32: θ is rounded to f32 first.
// Computed in double and rounded once, i.e. the correctly rounded f32 result (bar double rounding).
float pow_f32(float theta, float e) { return float(std::pow(double(theta), double(e))); }

}  // namespace

const char* rope_kind_name(RopeKind kind) {
  return kind == RopeKind::Default ? "default" : "proportional";
}

std::vector<float> rope_inv_freq(RopeKind kind, int64_t head_dim, double theta, double partial_rotary_factor) {
  Check c{"rope_inv_freq"};
  if (head_dim < 2 || head_dim % 2 != 0)
    c.fail(cat("head_dim must be even and ≥ 2 (a half-split rotation needs an even d_rot), got ", head_dim));
  if (!(theta > 0.0 && std::isfinite(theta) && std::isfinite(float(theta))))
    c.fail(cat("theta must be finite and > 0, got ", theta));
  const double p = partial_rotary_factor;
  if (!(p > 0.0 && p <= 1.0)) c.fail(cat("partial_rotary_factor must be in (0, 1], got ", p));
  const float th = float(theta);

  std::vector<float> inv;
  if (kind == RopeKind::Default) {
    // transformers: dim = int(head_dim · p); 1 / base ** (arange(0, dim, 2).float() / dim)
    const int64_t dim = int64_t(double(head_dim) * p);
    if (dim < 2 || dim % 2 != 0)
      c.fail(cat("head_dim ", head_dim, " × partial_rotary_factor ", p, " gives d_rot = ", dim, "; it must be even and ≥ 2"));
    for (int64_t j = 0; j < dim / 2; ++j) inv.push_back(1.f / pow_f32(th, float(2 * j) / float(dim)));
  } else {
    // transformers' proportional rope: rope_angles = int(p · head_dim // 2) frequencies with the FULL
    // head_dim as exponent denominator, then zeros ("nope" angles: cos 1, sin 0) up to head_dim / 2.
    const int64_t rope_angles = std::min(head_dim / 2, int64_t(std::floor(p * double(head_dim) / 2.0)) +
                                                           (mutation("partial_rotary_plus_1") ? 1 : 0));
    inv.assign(size_t(head_dim / 2), 0.f);
    for (int64_t j = 0; j < rope_angles; ++j) inv[size_t(j)] = 1.f / pow_f32(th, float(2 * j) / float(head_dim));
  }
  return inv;
}

void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& out, const Exec& ex) {
  Check c{"rope"};
  check_heads(c, x);
  c.dtype(positions, "positions", {DType::I32, DType::I64});
  c.rank(positions, "positions", 1);
  c.size(positions, "positions", 0, x.size(0), "one position per token, x dimension 0");
  c.dtype(inv_freq, "inv_freq", {DType::F32});
  c.rank(inv_freq, "inv_freq", 1);
  c.contiguous(inv_freq, "inv_freq");
  const int64_t n = inv_freq.size(0), d = x.size(2);
  if (n < 1) c.fail("inv_freq is empty; it needs at least one frequency");
  if (2 * n > d)
    c.fail(cat("inv_freq has ", n, " frequencies, so d_rot = ", 2 * n, " exceeds the head dimension d = ", d,
               " of x ", x.describe(), " (need len(inv_freq) ≤ d/2)"));
  c.output(out, "out", x.shape(), x.dtype());
  check_inplace_or_disjoint(c, out, x, "x");
  c.no_alias(out, "out", positions, "positions");
  c.no_alias(out, "out", inv_freq, "inv_freq");
  run_op(c.op, ex, {&x, &positions, &inv_freq}, {&out}, [&](const Backend& b) { b.rope(x, positions, inv_freq, out); });
}

void rope_2d(const Tensor& x, const Tensor& positions, double theta, Tensor& out, const Exec& ex) {
  Check c{"rope_2d"};
  check_heads(c, x);
  const int64_t d = x.size(2);
  if (d < 4 || d % 4 != 0)
    c.fail(cat("x ", x.describe(), ": head dimension d = ", d, " must be a positive multiple of 4 (two half-split halves)"));
  c.dtype(positions, "positions", {DType::I32, DType::I64});
  c.rank(positions, "positions", 2);
  c.size(positions, "positions", 0, x.size(0), "one (x, y) position per patch, x dimension 0");
  c.size(positions, "positions", 1, 2, "(x, y)");
  if (!(theta > 0.0 && std::isfinite(theta))) c.fail(cat("theta must be finite and > 0, got ", theta));
  c.output(out, "out", x.shape(), x.dtype());
  check_inplace_or_disjoint(c, out, x, "x");
  c.no_alias(out, "out", positions, "positions");
  // Gemma4VisionRotaryEmbedding: default-rope frequencies over spatial_dim = d / 2 (a host table).
  const std::vector<float> inv = rope_inv_freq(RopeKind::Default, d / 2, theta, 1.0);
  run_op(c.op, ex, {&x, &positions}, {&out}, [&](const Backend& b) { b.rope_2d(x, positions, inv, out); });
}

}  // namespace mb::ops
