// markbase._core.ops: the unary ops (gelu_tanh, silu, ..., scale) and add, mul (ops/elementwise.h).
#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "ops/elementwise.h"

namespace mb::py_bind {
namespace {

Tensor run_unary(const py::object& xo, ops::UnaryParams p, const py::object& out, const std::string& device, bool reference) {
  const char* name = ops::unary_name(p.kind);
  Tensor x = as_tensor(xo, name, "x");
  Tensor y = out_or_empty(out, name, x.dtype(), x.shape());
  run_ops(device, reference, [&](const Exec& ex) { ops::unary(x, y, p, ex); });
  return y;
}

void bind_ops_elementwise(py::module_& m) {
  auto unary_def = [&](const char* name, ops::UnaryKind kind, const char* doc) {
    m.def(name, [kind](const py::object& x, const py::object& out, const std::string& device, bool reference) {
      return run_unary(x, {kind}, out, device, reference);
    }, py::arg("x"), py::kw_only(), py::arg("out") = py::none(), py::arg("device") = "cpu", py::arg("reference") = false, doc);
  };
  unary_def("gelu_tanh", ops::UnaryKind::GeluTanh, "0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³)))");
  unary_def("silu", ops::UnaryKind::Silu, "x·sigmoid(x)");
  unary_def("relu", ops::UnaryKind::Relu, "max(x, 0)");
  unary_def("sigmoid", ops::UnaryKind::Sigmoid, "1 / (1 + e^-x)");
  unary_def("softplus", ops::UnaryKind::Softplus, "log(1 + e^x) (x for x > 20, as torch)");
  m.def("softcap", [](const py::object& x, float cap, const py::object& out, const std::string& device, bool reference) {
    return run_unary(x, {ops::UnaryKind::Softcap, cap}, out, device, reference);
  }, py::arg("x"), py::arg("cap"), py::kw_only(), py::arg("out") = py::none(), py::arg("device") = "cpu",
     py::arg("reference") = false, "cap·tanh(x / cap)");
  m.def("clamp", [](const py::object& x, float lo, float hi, const py::object& out, const std::string& device, bool reference) {
    return run_unary(x, {ops::UnaryKind::Clamp, lo, hi}, out, device, reference);
  }, py::arg("x"), py::arg("lo"), py::arg("hi"), py::kw_only(), py::arg("out") = py::none(), py::arg("device") = "cpu",
     py::arg("reference") = false, "min(max(x, lo), hi); NaN stays NaN");
  m.def("scale", [](const py::object& x, float factor, const py::object& out, const std::string& device, bool reference) {
    return run_unary(x, {ops::UnaryKind::Scale, factor}, out, device, reference);
  }, py::arg("x"), py::arg("factor"), py::kw_only(), py::arg("out") = py::none(), py::arg("device") = "cpu",
     py::arg("reference") = false, "x·factor");

  auto binary_def = [&](const char* name, ops::BinaryKind kind) {
    m.def(name, [kind, name](const py::object& ao, const py::object& bo, const py::object& out, const std::string& device, bool reference) {
      Tensor a = as_tensor(ao, name, "a");
      Tensor b = as_tensor(bo, name, "b");
      Tensor y = out_or_empty(out, name, a.dtype(), a.shape());
      run_ops(device, reference, [&](const Exec& ex) { ops::binary(a, b, y, kind, ex); });
      return y;
    }, py::arg("a"), py::arg("b"), py::kw_only(), py::arg("out") = py::none(), py::arg("device") = "cpu",
       py::arg("reference") = false);
  };
  binary_def("add", ops::BinaryKind::Add);
  binary_def("mul", ops::BinaryKind::Mul);
}

Registrar reg_ops_elementwise("ops", bind_ops_elementwise);

}  // namespace
}  // namespace mb::py_bind
