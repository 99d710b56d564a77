#include "core/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <sstream>

#include "core/errors.h"
#include "core/host_memory.h"

namespace mb {

Dims contiguous_strides(const Shape& shape) {
  Dims st(shape.size());
  int64_t acc = 1;
  for (int64_t i = int64_t(shape.size()) - 1; i >= 0; --i) {
    st[size_t(i)] = acc;
    acc *= std::max<int64_t>(shape[size_t(i)], 1);
  }
  return st;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

static int64_t checked_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw InputError(cat("negative dimension in shape ", shape_str(shape)));
    if (d != 0 && n > (int64_t(1) << 50) / d) throw InputError(cat("shape ", shape_str(shape), " is too large"));
    n *= d;
  }
  return n;
}

Tensor Tensor::empty(DType dtype, const Shape& shape) {
  int64_t n = checked_numel(shape);
  int64_t block = dtype_block_size(dtype);
  if (n % block) throw InputError(cat("shape ", shape_str(shape), " is not a multiple of the ", dtype_name(dtype), " block size"));
  size_t bytes = size_t(n / block) * dtype_itemsize(dtype);
  // Through the installed host allocator (core/host_memory.h), so a GPU backend can use it in place.
  std::shared_ptr<void> owner = host_alloc(bytes);
  if (!owner) throw MarkbaseError(cat("out of memory allocating ", bytes, " bytes for ", dtype_name(dtype), shape_str(shape)));
  void* p = owner.get();
  return wrap(p, dtype, shape, contiguous_strides(shape), std::move(owner), StorageKind::Owned);
}

Tensor Tensor::zeros(DType dtype, const Shape& shape) {
  Tensor t = empty(dtype, shape);
  std::memset(t.data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::wrap(void* data, DType dtype, const Shape& shape, Dims strides,
                    std::shared_ptr<void> owner, StorageKind kind, bool writable) {
  if (strides.size() != shape.size()) throw InputError("Tensor::wrap: strides and shape differ in rank");
  checked_numel(shape);
  Tensor t;
  t.base_ = data;
  t.owner_ = std::move(owner);
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.strides_ = std::move(strides);
  t.kind_ = kind;
  t.writable_ = writable;
  return t;
}

Tensor Tensor::wrap_contiguous(void* data, DType dtype, const Shape& shape, std::shared_ptr<void> owner,
                               StorageKind kind, bool writable) {
  return wrap(data, dtype, shape, contiguous_strides(shape), std::move(owner), kind, writable);
}

static int64_t norm_dim(int64_t d, int64_t rank, const char* what) {
  int64_t r = d < 0 ? d + rank : d;
  if (r < 0 || r >= rank) throw InputError(cat(what, ": dimension ", d, " out of range for rank ", rank));
  return r;
}

int64_t Tensor::size(int64_t d) const { return shape_[size_t(norm_dim(d, dim(), "size"))]; }
int64_t Tensor::stride(int64_t d) const { return strides_[size_t(norm_dim(d, dim(), "stride"))]; }
int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // nothing to lay out (numpy gives empty arrays zero strides)
  int64_t acc = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape_[size_t(i)] != 1 && strides_[size_t(i)] != acc) return false;
    acc *= shape_[size_t(i)];
  }
  return true;
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (!is_contiguous()) throw InputError(cat("reshape: tensor ", describe(), " is not contiguous"));
  Shape s = shape;
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) throw InputError("reshape: more than one -1 in the new shape");
      infer = int64_t(i);
    } else if (s[i] < 0) {
      throw InputError(cat("reshape: invalid dimension ", s[i]));
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel() % known) throw InputError(cat("reshape: cannot infer -1 for ", describe(), " -> ", shape_str(shape)));
    s[size_t(infer)] = numel() / known;
  }
  if (checked_numel(s) != numel()) throw InputError(cat("reshape: ", describe(), " cannot become ", shape_str(shape)));
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t stop) const {
  d = norm_dim(d, dim(), "slice");
  int64_t n = shape_[size_t(d)];
  if (start < 0) start += n;
  if (stop < 0) stop += n;
  if (start < 0 || stop > n || start > stop)
    throw InputError(cat("slice: range [", start, ", ", stop, ") out of bounds for dimension ", d, " of ", describe()));
  Tensor t = *this;
  t.offset_ += start * strides_[size_t(d)];
  t.shape_[size_t(d)] = stop - start;
  return t;
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = norm_dim(d, dim(), "select");
  int64_t n = shape_[size_t(d)];
  if (index < 0) index += n;
  if (index < 0 || index >= n) throw InputError(cat("select: index ", index, " out of range for dimension ", d, " of ", describe()));
  Tensor t = *this;
  t.offset_ += index * strides_[size_t(d)];
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  d0 = norm_dim(d0, dim(), "transpose");
  d1 = norm_dim(d1, dim(), "transpose");
  Tensor t = *this;
  std::swap(t.shape_[size_t(d0)], t.shape_[size_t(d1)]);
  std::swap(t.strides_[size_t(d0)], t.strides_[size_t(d1)]);
  return t;
}

Tensor Tensor::permute(const Dims& order) const {
  if (int64_t(order.size()) != dim()) throw InputError(cat("permute: order has ", order.size(), " entries for rank ", dim()));
  std::vector<bool> seen(order.size(), false);
  Tensor t = *this;
  for (size_t i = 0; i < order.size(); ++i) {
    int64_t o = norm_dim(order[i], dim(), "permute");
    if (seen[size_t(o)]) throw InputError("permute: repeated dimension");
    seen[size_t(o)] = true;
    t.shape_[i] = shape_[size_t(o)];
    t.strides_[i] = strides_[size_t(o)];
  }
  return t;
}

// Visits every element index of `shape` in row-major order, calling f(src_offset, dst_offset).
template <class F>
static void for_each_strided(const Shape& shape, const Dims& sa, const Dims& sb, F&& f) {
  int64_t rank = int64_t(shape.size());
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n == 0) return;
  std::vector<int64_t> idx(size_t(rank), 0);
  int64_t oa = 0, ob = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(oa, ob);
    for (int64_t d = rank - 1; d >= 0; --d) {
      size_t u = size_t(d);
      if (++idx[u] < shape[u]) { oa += sa[u]; ob += sb[u]; break; }
      oa -= sa[u] * (shape[u] - 1);
      ob -= sb[u] * (shape[u] - 1);
      idx[u] = 0;
    }
  }
}

void copy_into(const Tensor& src, Tensor& dst) {
  if (src.shape() != dst.shape()) throw InputError(cat("copy: shapes differ: ", src.describe(), " vs ", dst.describe()));
  if (!dst.writable()) throw InputError("copy: destination is read-only");
  const DType a = src.dtype(), b = dst.dtype();
  if (dtype_block_size(a) != 1 || dtype_block_size(b) != 1) throw InputError("copy: block-quantised tensors cannot be copied elementwise");
  if (a == b) {
    size_t item = dtype_itemsize(a);
    const char* s = static_cast<const char*>(src.data());
    char* d = static_cast<char*>(dst.data());
    if (src.is_contiguous() && dst.is_contiguous()) {
      std::memcpy(d, s, src.nbytes());
      return;
    }
    for_each_strided(src.shape(), src.strides(), dst.strides(),
                     [&](int64_t i, int64_t j) { std::memcpy(d + j * int64_t(item), s + i * int64_t(item), item); });
    return;
  }
  if (!dtype_is_float(a) || !dtype_is_float(b))
    throw InputError(cat("copy: cannot convert ", dtype_name(a), " to ", dtype_name(b)));
  auto load = [&](int64_t i) -> float {
    switch (a) {
      case DType::F32: return src.data_as<const float>()[i];
      case DType::BF16: return bf16_to_f32(src.data_as<const uint16_t>()[i]);
      default: return f16_to_f32(src.data_as<const uint16_t>()[i]);
    }
  };
  for_each_strided(src.shape(), src.strides(), dst.strides(), [&](int64_t i, int64_t j) {
    float v = load(i);
    switch (b) {
      case DType::F32: dst.data_as<float>()[j] = v; break;
      case DType::BF16: dst.data_as<uint16_t>()[j] = f32_to_bf16(v); break;
      default: dst.data_as<uint16_t>()[j] = f32_to_f16(v); break;
    }
  });
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor t = empty(dtype_, shape_);
  copy_into(*this, t);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return contiguous();
  Tensor t = empty(dtype, shape_);
  copy_into(*this, t);
  return t;
}

std::string Tensor::describe() const { return cat(dtype_name(dtype_), shape_str(shape_)); }

void byte_span(const Tensor& t, const char** lo, const char** hi) {
  const char* base = static_cast<const char*>(t.data());
  int64_t item = int64_t(dtype_itemsize(t.dtype()));
  int64_t mn = 0, mx = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 0) { *lo = *hi = base; return; }
    int64_t ext = (t.size(d) - 1) * t.stride(d);
    (ext < 0 ? mn : mx) += ext;
  }
  *lo = base + mn * item;
  *hi = base + (mx + 1) * item;
}

}  // namespace mb
