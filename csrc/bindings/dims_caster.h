// pybind11 conversion of mb::Dims (shapes, strides) from / to Python sequences of ints, through
// std::vector<int64_t>. Included by every binding file that passes a shape (via tensor_py.h).
#pragma once
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <vector>

#include "core/dims.h"
#include "core/errors.h"

namespace pybind11::detail {

template <>
struct type_caster<mb::Dims> {
  PYBIND11_TYPE_CASTER(mb::Dims, const_name("Sequence[int]"));

  bool load(handle src, bool convert) {
    make_caster<std::vector<int64_t>> inner;
    if (!inner.load(src, convert)) return false;
    const auto& v = cast_op<const std::vector<int64_t>&>(inner);
    if (v.size() > mb::Dims::kMaxDims)
      throw mb::InputError(mb::cat("a shape of ", v.size(), " dimensions: markbase tensors have at most ",
                                   mb::Dims::kMaxDims));
    value = mb::Dims(v);
    return true;
  }
  static handle cast(const mb::Dims& d, return_value_policy policy, handle parent) {
    return make_caster<std::vector<int64_t>>::cast(d.to_vector(), policy, parent);
  }
};

}  // namespace pybind11::detail
