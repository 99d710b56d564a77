// Front-door validation shared by every op: each failure is an InputError naming the op and operand.
#pragma once
#include <initializer_list>

#include "core/errors.h"
#include "core/tensor.h"

namespace mb::ops {

struct Check {
  const char* op;

  [[noreturn]] void fail(const std::string& msg) const;
  void defined(const Tensor& t, const char* name) const;
  void rank(const Tensor& t, const char* name, int64_t r) const;
  void rank_between(const Tensor& t, const char* name, int64_t lo, int64_t hi) const;
  void dtype(const Tensor& t, const char* name, std::initializer_list<DType> allowed) const;
  void contiguous(const Tensor& t, const char* name) const;
  // The last dimension is densely packed (stride 1); other strides are free.
  void inner_contiguous(const Tensor& t, const char* name) const;
  void size(const Tensor& t, const char* name, int64_t dim, int64_t expected, const char* why = nullptr) const;
  void same_shape(const Tensor& a, const char* an, const Tensor& b, const char* bn) const;
  // An output: writable, contiguous, exactly this shape and dtype.
  void output(const Tensor& out, const char* name, const Shape& shape, DType dtype) const;
  // Outputs must not overlap inputs (the classic source of silent corruption).
  void no_alias(const Tensor& out, const char* oname, const Tensor& in, const char* iname) const;
  // Every element of `ids` (i32 or i64, contiguous) is in [0, bound); the failure names the first one
  // outside: "<name>[i] = v is out of range [0, bound) of <what>". Reads ids on the host.
  void indices_in_range(const Tensor& ids, const char* name, int64_t bound, const char* what) const;
  // A linear layer's optional bias: null, or [N] f32 / bf16 / f16 contiguous.
  void linear_bias(const Tensor* bias, int64_t N) const;
};

}  // namespace mb::ops
