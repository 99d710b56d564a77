#include "ops/moe.h"

#include <limits>

#include "ops/check.h"
#include "ops/run_op.h"

namespace mb::ops {

void route_weights(const Tensor& w, const Tensor& ids, const Tensor& scale, Tensor& out_w, Tensor& out_ids,
                   const Exec& ex) {
  Check c{"route_weights"};
  c.rank(w, "w", 2);
  c.dtype(w, "w", {DType::F32});
  c.contiguous(w, "w");
  c.rank(ids, "ids", 2);
  c.dtype(ids, "ids", {DType::I32});
  c.contiguous(ids, "ids");
  c.same_shape(ids, "ids", w, "w");
  c.rank(scale, "scale", 1);
  c.dtype(scale, "scale", {DType::F32});
  c.contiguous(scale, "scale");
  if (scale.size(0) < 1) c.fail(cat("scale ", scale.describe(), " has no experts"));
  if (w.numel() > std::numeric_limits<int32_t>::max()) c.fail(cat("w ", w.describe(), " is too large"));
  c.output(out_w, "out_w", w.shape(), DType::F32);
  c.output(out_ids, "out_ids", w.shape(), DType::I32);
  // In place (out_w exactly w, out_ids exactly ids) is allowed; any other overlap is not.
  if (out_w.data() != w.data()) c.no_alias(out_w, "out_w", w, "w");
  if (out_ids.data() != ids.data()) c.no_alias(out_ids, "out_ids", ids, "ids");
  c.no_alias(out_w, "out_w", ids, "ids");
  c.no_alias(out_ids, "out_ids", w, "w");
  c.no_alias(out_w, "out_w", out_ids, "out_ids");
  c.no_alias(out_w, "out_w", scale, "scale");
  c.no_alias(out_ids, "out_ids", scale, "scale");
  run_op(c.op, ex, {&w, &ids, &scale}, {&out_w, &out_ids}, [&](const Backend& b) {
    // A deferred backend's ids may still be in flight: its kernel gives a bad one the weight 0 instead.
    if (!b.deferred()) c.indices_in_range(ids, "ids", scale.size(0), "experts");
    b.route_weights(w, ids, scale, out_w, out_ids);
  });
}

void index_add(Tensor& out, const Tensor& index, const Tensor& src, const Tensor* weight, const Exec& ex) {
  Check c{"index_add"};
  c.rank(out, "out", 2);
  c.dtype(out, "out", {DType::F32});
  c.contiguous(out, "out");
  if (!out.writable()) c.fail(cat("out ", out.describe(), " is read-only"));
  c.rank(index, "index", 1);
  c.dtype(index, "index", {DType::I32});
  c.contiguous(index, "index");
  const int64_t R = out.size(0), D = out.size(1), n = index.size(0);
  c.rank(src, "src", 2);
  c.dtype(src, "src", {DType::F32});
  c.contiguous(src, "src");
  c.size(src, "src", 0, n, "one row per index");
  c.size(src, "src", 1, D, "out's row length");
  if (weight) {
    c.rank(*weight, "weight", 1);
    c.dtype(*weight, "weight", {DType::F32});
    c.contiguous(*weight, "weight");
    c.size(*weight, "weight", 0, n, "one weight per index");
    c.no_alias(out, "out", *weight, "weight");
  }
  if (R > std::numeric_limits<int32_t>::max() || D > std::numeric_limits<int32_t>::max() ||
      n > std::numeric_limits<int32_t>::max())
    c.fail(cat("out ", out.describe(), " / src ", src.describe(), " exceed 32-bit sizes"));
  c.no_alias(out, "out", index, "index");
  c.no_alias(out, "out", src, "src");
  c.indices_in_range(index, "index", R, "out's rows");
  run_op(c.op, ex, {&index, &src, weight}, {&out}, [&](const Backend& b) { b.index_add(out, index, src, weight); });
}

}  // namespace mb::ops
