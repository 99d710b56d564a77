// markbase._core.ops: rope, rope_2d, rope_inv_freq (ops/rope.h).
#include <cstring>
#include <vector>

#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "core/errors.h"
#include "ops/rope.h"

namespace mb::py_bind {
namespace {

ops::RopeKind rope_kind_from_name(const std::string& name) {
  if (name == "default") return ops::RopeKind::Default;
  if (name == "proportional") return ops::RopeKind::Proportional;
  throw InputError(cat("rope_inv_freq: kind must be 'default' or 'proportional', got '", name, "'"));
}

void bind_ops_rope(py::module_& m) {
  m.def("rope", [](const py::object& xo, const py::object& po, const py::object& fo, const py::object& out,
                   const std::string& device, bool reference) {
    Tensor x = as_tensor(xo, "rope", "x");
    Tensor pos = as_tensor(po, "rope", "positions");
    Tensor inv = as_tensor(fo, "rope", "inv_freq");
    Tensor y = out_or_empty(out, "rope", x.dtype(), x.shape());
    run_ops(device, reference, [&](const Exec& ex) { ops::rope(x, pos, inv, y, ex); });
    return y;
  }, py::arg("x"), py::arg("positions"), py::arg("inv_freq"), py::kw_only(), py::arg("out") = py::none(),
     py::arg("device") = "cpu", py::arg("reference") = false,
     "Half-split rope of x [T, H, d] at positions [T] with inv_freq [n] (rotates dims < 2n, pairs (i, i+n)).");

  m.def("rope_2d", [](const py::object& xo, const py::object& po, double theta, const py::object& out,
                      const std::string& device, bool reference) {
    Tensor x = as_tensor(xo, "rope_2d", "x");
    Tensor pos = as_tensor(po, "rope_2d", "positions");
    Tensor y = out_or_empty(out, "rope_2d", x.dtype(), x.shape());
    run_ops(device, reference, [&](const Exec& ex) { ops::rope_2d(x, pos, theta, y, ex); });
    return y;
  }, py::arg("x"), py::arg("positions"), py::arg("theta"), py::kw_only(), py::arg("out") = py::none(),
     py::arg("device") = "cpu", py::arg("reference") = false,
     "Vision axial rope of x [N, H, d] at positions [N, 2] = (x, y): first half of each head by x, second by y.");

  m.def("rope_inv_freq", [](const std::string& kind, int64_t head_dim, double theta, double partial_rotary_factor) {
    std::vector<float> inv = ops::rope_inv_freq(rope_kind_from_name(kind), head_dim, theta, partial_rotary_factor);
    py::array_t<float> arr(py::ssize_t(inv.size()));
    if (!inv.empty()) std::memcpy(arr.mutable_data(), inv.data(), inv.size() * sizeof(float));
    return arr;
  }, py::arg("kind"), py::arg("head_dim"), py::arg("theta"), py::arg("partial_rotary_factor") = 1.0,
     "float32 inverse frequencies as transformers builds them; kind 'default' or 'proportional'.");
}

Registrar reg_ops_rope("ops", bind_ops_rope);

}  // namespace
}  // namespace mb::py_bind
