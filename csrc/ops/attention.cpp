#include "ops/attention.h"

#include <cmath>

#include "ops/check.h"
#include "ops/run_op.h"

namespace mb::ops {

// A 1-D i32 index tensor of length n (positions or block ids), densely packed.
static void check_index_vector(const Check& c, const Tensor& t, const char* name, int64_t n, const char* why) {
  c.rank(t, name, 1);
  c.dtype(t, name, {DType::I32});
  c.size(t, name, 0, n, why);
  if (t.numel() > 0) c.contiguous(t, name);
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
               const Tensor* q_block, const Tensor* k_block, Tensor& out, const AttentionParams& p,
               const Exec& ex) {
  Check c{"attention"};
  // q: [T, Hq, d]; k, v: [S, Hkv, d]
  c.rank(q, "q", 3);
  c.dtype(q, "q", {DType::F32});
  // Layout only matters when there are elements (numpy reports zero strides for empty arrays).
  if (q.numel() > 0) c.contiguous(q, "q");
  c.rank(k, "k", 3);
  c.dtype(k, "k", {DType::F32});
  if (k.numel() > 0) c.inner_contiguous(k, "k");
  c.rank(v, "v", 3);
  c.dtype(v, "v", {DType::F32});
  if (v.numel() > 0) c.inner_contiguous(v, "v");
  const int64_t T = q.size(0), Hq = q.size(1), d = q.size(2);
  const int64_t S = k.size(0), Hkv = k.size(1);
  if (d < 1) c.fail(cat("q ", q.describe(), " must have a head dim of at least 1"));
  if (Hq < 1 || Hkv < 1) c.fail(cat("q ", q.describe(), " and k ", k.describe(), " need at least one head"));
  c.size(k, "k", 2, d, "head dim of q");
  c.size(v, "v", 2, d, "head dim of q");
  c.same_shape(v, "v", k, "k");
  if (Hq % Hkv != 0)
    c.fail(cat("q has ", Hq, " heads, not a multiple of the ", Hkv, " kv heads of k ", k.describe()));

  check_index_vector(c, q_pos, "q_pos", T, "one position per query");
  check_index_vector(c, k_pos, "k_pos", S, "one position per key");
  if ((q_block == nullptr) != (k_block == nullptr))
    c.fail(q_block ? "q_block given without k_block" : "k_block given without q_block");
  if (q_block) {
    check_index_vector(c, *q_block, "q_block", T, "one block id per query");
    check_index_vector(c, *k_block, "k_block", S, "one block id per key");
  }

  if (!std::isfinite(p.scale)) c.fail(cat("scale must be finite, got ", p.scale));
  if (!(p.softcap >= 0.f && std::isfinite(p.softcap))) c.fail(cat("softcap must be finite and >= 0, got ", p.softcap));
  if (p.window < 0) c.fail(cat("window must be >= 0 (0 = unlimited), got ", p.window));

  c.output(out, "out", {T, Hq, d}, DType::F32);
  c.no_alias(out, "out", q, "q");
  c.no_alias(out, "out", k, "k");
  c.no_alias(out, "out", v, "v");
  c.no_alias(out, "out", q_pos, "q_pos");
  c.no_alias(out, "out", k_pos, "k_pos");
  if (q_block) {
    c.no_alias(out, "out", *q_block, "q_block");
    c.no_alias(out, "out", *k_block, "k_block");
  }
  run_op(c.op, ex, {&q, &k, &v, &q_pos, &k_pos, q_block, k_block}, {&out}, [&](const Backend& b) {
    b.attention(q, k, v, q_pos, k_pos, q_block, k_block, out, p);
  });
}

void local_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& rel, float softcap, Tensor& out,
                     const Exec& ex) {
  Check c{"local_attention"};
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&q, "q"}, {&k, "k"}, {&v, "v"}, {&rel, "rel"}}) {
    c.rank(*t, name, 3);
    c.dtype(*t, name, {DType::F32});
    if (t->numel() > 0) c.contiguous(*t, name);
  }
  const int64_t T = q.size(0), H = q.size(1), d = q.size(2);
  if (d < 1 || H < 1) c.fail(cat("q ", q.describe(), " needs at least one head of at least one element"));
  c.same_shape(k, "k", q, "q");
  c.same_shape(v, "v", q, "q");
  if (rel.size(0) < 1) c.fail(cat("rel ", rel.describe(), " must hold at least one distance (the window)"));
  c.size(rel, "rel", 1, H, "heads of q");
  c.size(rel, "rel", 2, d, "head dim of q");
  if (!(softcap >= 0.f && std::isfinite(softcap))) c.fail(cat("softcap must be finite and >= 0, got ", softcap));
  c.output(out, "out", {T, H, d}, DType::F32);
  c.no_alias(out, "out", q, "q");
  c.no_alias(out, "out", k, "k");
  c.no_alias(out, "out", v, "v");
  c.no_alias(out, "out", rel, "rel");
  run_op(c.op, ex, {&q, &k, &v, &rel}, {&out}, [&](const Backend& b) { b.local_attention(q, k, v, rel, softcap, out); });
}

}  // namespace mb::ops
