// markbase._core.ops: rms_norm, layer_norm (ops/norm.h).
#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "ops/norm.h"

namespace mb::py_bind {
namespace {

// An optional tensor argument as the C++ API takes it: undefined when None.
Tensor optional_tensor(const py::object& obj, const char* op, const char* arg) {
  std::optional<Tensor> t = as_optional_tensor(obj, op, arg);
  return t ? *t : Tensor();
}

void bind_ops_norm(py::module_& m) {
  m.def("rms_norm", [](const py::object& xo, const py::object& wo, float eps, const py::object& out,
                       const std::string& device, bool reference) {
    Tensor x = as_tensor(xo, "rms_norm", "x");
    Tensor w = optional_tensor(wo, "rms_norm", "weight");
    Tensor y = out_or_empty(out, "rms_norm", x.dtype(), x.shape());
    run_ops(device, reference, [&](const Exec& ex) { ops::rms_norm(x, w, eps, y, ex); });
    return y;
  }, py::arg("x"), py::arg("weight") = py::none(), py::kw_only(), py::arg("eps") = 1e-6f,
     py::arg("out") = py::none(), py::arg("device") = "cpu", py::arg("reference") = false,
     "x · (mean(x²) + eps)^-0.5 · weight over the last dim (plain weight, not 1 + weight); weight may be None.");

  m.def("layer_norm", [](const py::object& xo, const py::object& wo, const py::object& bo, float eps,
                         const py::object& out, const std::string& device, bool reference) {
    Tensor x = as_tensor(xo, "layer_norm", "x");
    Tensor w = optional_tensor(wo, "layer_norm", "weight");
    Tensor b = optional_tensor(bo, "layer_norm", "bias");
    Tensor y = out_or_empty(out, "layer_norm", x.dtype(), x.shape());
    run_ops(device, reference, [&](const Exec& ex) { ops::layer_norm(x, w, b, eps, y, ex); });
    return y;
  }, py::arg("x"), py::arg("weight") = py::none(), py::arg("bias") = py::none(), py::kw_only(),
     py::arg("eps") = 1e-5f, py::arg("out") = py::none(), py::arg("device") = "cpu", py::arg("reference") = false,
     "(x − mean) / sqrt(var + eps) · weight + bias over the last dim (biased variance, as torch).");
}

Registrar reg_ops_norm("ops", bind_ops_norm);

}  // namespace
}  // namespace mb::py_bind
