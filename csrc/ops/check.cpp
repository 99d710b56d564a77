#include "ops/check.h"

#include <algorithm>

namespace mb::ops {

void Check::fail(const std::string& msg) const { throw InputError(cat(op, ": ", msg)); }

void Check::defined(const Tensor& t, const char* name) const {
  if (!t.defined()) fail(cat(name, " is missing"));
}

void Check::rank(const Tensor& t, const char* name, int64_t r) const {
  defined(t, name);
  if (t.dim() != r) fail(cat(name, " must have ", r, " dimensions, got ", t.describe()));
}

void Check::rank_between(const Tensor& t, const char* name, int64_t lo, int64_t hi) const {
  defined(t, name);
  if (t.dim() < lo || t.dim() > hi) fail(cat(name, " must have ", lo, " to ", hi, " dimensions, got ", t.describe()));
}

void Check::dtype(const Tensor& t, const char* name, std::initializer_list<DType> allowed) const {
  defined(t, name);
  for (DType d : allowed)
    if (t.dtype() == d) return;
  std::string list;
  for (DType d : allowed) {
    if (!list.empty()) list += ", ";
    list += dtype_name(d);
  }
  fail(cat(name, " has dtype ", dtype_name(t.dtype()), "; expected one of: ", list));
}

void Check::contiguous(const Tensor& t, const char* name) const {
  if (!t.is_contiguous()) fail(cat(name, " ", t.describe(), " must be contiguous"));
}

void Check::inner_contiguous(const Tensor& t, const char* name) const {
  if (t.dim() > 0 && t.size(-1) > 1 && t.stride(-1) != 1) fail(cat(name, " ", t.describe(), " must have a contiguous last dimension"));
}

void Check::size(const Tensor& t, const char* name, int64_t dim, int64_t expected, const char* why) const {
  if (t.size(dim) != expected)
    fail(cat(name, " ", t.describe(), ": dimension ", dim, " must be ", expected, why ? cat(" (", why, ")") : std::string()));
}

void Check::same_shape(const Tensor& a, const char* an, const Tensor& b, const char* bn) const {
  defined(a, an);
  defined(b, bn);
  if (a.shape() != b.shape()) fail(cat(an, " ", a.describe(), " and ", bn, " ", b.describe(), " must have the same shape"));
}

void Check::output(const Tensor& out, const char* name, const Shape& shape, DType dtype) const {
  defined(out, name);
  if (out.shape() != shape) fail(cat(name, " must have shape ", shape_str(shape), ", got ", out.describe()));
  if (out.dtype() != dtype) fail(cat(name, " must have dtype ", dtype_name(dtype), ", got ", dtype_name(out.dtype())));
  if (!out.writable()) fail(cat(name, " is read-only"));
  contiguous(out, name);
}

void Check::no_alias(const Tensor& out, const char* oname, const Tensor& in, const char* iname) const {
  if (!out.defined() || !in.defined() || out.numel() == 0 || in.numel() == 0) return;
  const char *a0, *a1, *b0, *b1;
  byte_span(out, &a0, &a1);
  byte_span(in, &b0, &b1);
  if (a0 < b1 && b0 < a1) fail(cat(oname, " overlaps input ", iname, " in memory (outputs may not alias inputs)"));
}

namespace {

template <class I>
void check_in_range(const Check& c, const I* ids, int64_t n, const char* name, int64_t bound, const char* what) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || int64_t(ids[i]) >= bound)
      c.fail(cat(name, "[", i, "] = ", int64_t(ids[i]), " is out of range [0, ", bound, ") of ", what));
}

}  // namespace

void Check::linear_bias(const Tensor* bias, int64_t N) const {
  if (!bias) return;
  rank(*bias, "bias", 1);
  dtype(*bias, "bias", {DType::F32, DType::BF16, DType::F16});
  contiguous(*bias, "bias");
  size(*bias, "bias", 0, N, "one value per row of w");
}

void Check::indices_in_range(const Tensor& ids, const char* name, int64_t bound, const char* what) const {
  if (ids.dtype() == DType::I64) check_in_range(*this, ids.data_as<const int64_t>(), ids.numel(), name, bound, what);
  else check_in_range(*this, ids.data_as<const int32_t>(), ids.numel(), name, bound, what);
}

}  // namespace mb::ops
