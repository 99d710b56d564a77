// markbase._core.ops: copy, concat (ops/shape.h).
#include <optional>
#include <string>
#include <vector>

#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "core/errors.h"
#include "ops/shape.h"

namespace mb::py_bind {
namespace {

void bind_ops_shape(py::module_& m) {
  m.def("copy", [](const py::object& so, const py::object& out, const std::optional<std::string>& dtype,
                   const std::string& device, bool reference) {
    Tensor src = as_tensor(so, "copy", "src");
    Tensor y;
    if (out.is_none()) y = Tensor::empty(dtype ? dtype_from_name(*dtype) : src.dtype(), src.shape());
    else y = as_tensor(out, "copy", "out");
    if (dtype && y.dtype() != dtype_from_name(*dtype))
      throw InputError(cat("copy: out has dtype ", dtype_name(y.dtype()), " but dtype='", *dtype, "' was requested"));
    run_ops(device, reference, [&](const Exec& ex) { ops::copy(src, y, ex); });
    return y;
  }, py::arg("src"), py::kw_only(), py::arg("out") = py::none(), py::arg("dtype") = py::none(),
     py::arg("device") = "cpu", py::arg("reference") = false,
     "A contiguous copy of any (strided) view; converts among f32 / bf16 / f16 when out (or dtype) differs.");

  m.def("concat", [](const py::sequence& seq, int64_t dim, const py::object& out, const std::string& device,
                     bool reference) {
    std::vector<Tensor> tensors;
    tensors.reserve(seq.size());
    for (size_t i = 0; i < seq.size(); ++i) {
      const std::string name = cat("tensors[", i, "]");
      tensors.push_back(as_tensor(seq[i], "concat", name.c_str()));
    }
    Tensor y;
    if (out.is_none()) {
      if (tensors.empty()) throw InputError("concat: tensors is empty (need at least one tensor)");
      const Tensor& t0 = tensors[0];
      const int64_t rank = t0.dim();
      if (rank == 0 || dim < -rank || dim >= rank)
        throw InputError(cat("concat: dim ", dim, " is out of range for rank ", rank));
      Shape shape = t0.shape();
      const size_t d = size_t(dim < 0 ? dim + rank : dim);
      shape[d] = 0;
      for (const Tensor& t : tensors) shape[d] += t.dim() == rank ? t.size(int64_t(d)) : 0;
      y = Tensor::empty(t0.dtype(), shape);
    } else {
      y = as_tensor(out, "concat", "out");
    }
    run_ops(device, reference, [&](const Exec& ex) { ops::concat(tensors, dim, y, ex); });
    return y;
  }, py::arg("tensors"), py::arg("dim"), py::kw_only(), py::arg("out") = py::none(), py::arg("device") = "cpu",
     py::arg("reference") = false, "The tensors (one dtype, any strides) joined along dim into a contiguous tensor.");
}

Registrar reg_ops_shape("ops", bind_ops_shape);

}  // namespace
}  // namespace mb::py_bind
