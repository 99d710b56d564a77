// markbase._core.ops: softmax (ops/softmax.h).
#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "ops/softmax.h"

namespace mb::py_bind {
namespace {

void bind_ops_softmax(py::module_& m) {
  m.def("softmax", [](const py::object& xo, const py::object& out, const std::string& device, bool reference) {
    Tensor x = as_tensor(xo, "softmax", "x");
    Tensor y = out_or_empty(out, "softmax", x.dtype(), x.shape());
    run_ops(device, reference, [&](const Exec& ex) { ops::softmax(x, y, ex); });
    return y;
  }, py::arg("x"), py::kw_only(), py::arg("out") = py::none(), py::arg("device") = "cpu",
     py::arg("reference") = false,
     "Softmax over the last dim in f32; an all −inf row gives zeros, a NaN makes its row NaN.");
}

Registrar reg_ops_softmax("ops", bind_ops_softmax);

}  // namespace
}  // namespace mb::py_bind
