#include "ops/embedding.h"

#include <cmath>

#include "ops/check.h"
#include "ops/run_op.h"

namespace mb::ops {

void embedding(const Tensor& table, const Tensor& ids, Tensor& out, float scale, const Exec& ex) {
  Check c{"embedding"};
  c.rank(table, "table", 2);
  c.dtype(table, "table", {DType::F32, DType::BF16, DType::F16});
  c.contiguous(table, "table");
  c.rank(ids, "ids", 1);
  c.dtype(ids, "ids", {DType::I32, DType::I64});
  c.contiguous(ids, "ids");
  c.dtype(out, "out", {DType::F32, DType::BF16});
  const int64_t V = table.size(0), D = table.size(1), T = ids.size(0);
  c.output(out, "out", {T, D}, out.dtype());
  c.no_alias(out, "out", table, "table");
  c.no_alias(out, "out", ids, "ids");
  if (!std::isfinite(scale)) c.fail(cat("scale must be finite, got ", scale));
  c.indices_in_range(ids, "ids", V, "table rows");
  run_op(c.op, ex, {&table, &ids}, {&out}, [&](const Backend& b) { b.embedding(table, ids, out, scale); });
}

}  // namespace mb::ops
