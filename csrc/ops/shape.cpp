#include "ops/shape.h"

#include "ops/check.h"
#include "ops/run_op.h"

namespace mb::ops {

static bool plain_dtype(DType t) { return dtype_block_size(t) == 1; }

void copy(const Tensor& src, Tensor& out, const Exec& ex) {
  Check c{"copy"};
  c.defined(src, "src");
  c.defined(out, "out");
  if (!plain_dtype(src.dtype())) c.fail(cat("src has block-quantised dtype ", dtype_name(src.dtype()), "; it cannot be copied elementwise"));
  if (src.dtype() != out.dtype() && !(dtype_is_float(src.dtype()) && dtype_is_float(out.dtype())))
    c.fail(cat("cannot convert src dtype ", dtype_name(src.dtype()), " to out dtype ", dtype_name(out.dtype()),
               " (conversion is only among f32, bf16 and f16)"));
  c.output(out, "out", src.shape(), out.dtype());
  c.no_alias(out, "out", src, "src");
  run_op(c.op, ex, {&src}, {&out}, [&](const Backend& b) { b.copy(src, out); });
}

void concat(const std::vector<Tensor>& tensors, int64_t dim, Tensor& out, const Exec& ex) {
  Check c{"concat"};
  if (tensors.empty()) c.fail("tensors is empty (need at least one tensor)");
  c.defined(out, "out");
  const Tensor& first = tensors[0];
  const int64_t rank = first.dim();
  if (rank == 0) c.fail("tensors[0] is 0-dimensional; there is no dimension to join along");
  if (dim < -rank || dim >= rank) c.fail(cat("dim ", dim, " is out of range for rank ", rank));
  const int64_t d = dim < 0 ? dim + rank : dim;
  Shape shape = first.shape();
  shape[size_t(d)] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const std::string name = cat("tensors[", i, "]");
    c.defined(t, name.c_str());
    if (!plain_dtype(t.dtype())) c.fail(cat(name, " has block-quantised dtype ", dtype_name(t.dtype())));
    if (t.dtype() != first.dtype())
      c.fail(cat(name, " has dtype ", dtype_name(t.dtype()), " but tensors[0] has ", dtype_name(first.dtype())));
    if (t.dim() != rank) c.fail(cat(name, " ", t.describe(), " has rank ", t.dim(), ", tensors[0] has ", rank));
    for (int64_t k = 0; k < rank; ++k)
      if (k != d && t.size(k) != first.size(k))
        c.fail(cat(name, " ", t.describe(), " differs from tensors[0] ", first.describe(), " in dimension ", k,
                   " (only dimension ", d, " may differ)"));
    shape[size_t(d)] += t.size(d);
  }
  c.output(out, "out", shape, first.dtype());
  for (size_t i = 0; i < tensors.size(); ++i) c.no_alias(out, "out", tensors[i], cat("tensors[", i, "]").c_str());
  run_op(c.op, ex, tensors, {&out}, [&](const Backend& b) { b.concat(tensors, d, out); });
}

}  // namespace mb::ops
