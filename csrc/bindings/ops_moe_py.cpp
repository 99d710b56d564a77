// markbase._core.ops: route_weights, index_add (ops/moe.h).
#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "ops/moe.h"

namespace mb::py_bind {
namespace {

void bind_ops_moe(py::module_& m) {
  m.def("route_weights", [](const py::object& wo, const py::object& io, const py::object& so, const py::object& out_w,
                            const py::object& out_ids, const std::string& device, bool reference) {
    Tensor w = as_tensor(wo, "route_weights", "w");
    Tensor ids = as_tensor(io, "route_weights", "ids");
    Tensor scale = as_tensor(so, "route_weights", "scale");
    Tensor yw = out_or_empty(out_w, "route_weights", DType::F32, w.shape());
    Tensor yi = out_or_empty(out_ids, "route_weights", DType::I32, w.shape());
    run_ops(device, reference, [&](const Exec& ex) { ops::route_weights(w, ids, scale, yw, yi, ex); });
    return py::make_tuple(yw, yi);
  }, py::arg("w"), py::arg("ids"), py::arg("scale"), py::kw_only(), py::arg("out_w") = py::none(),
     py::arg("out_ids") = py::none(), py::arg("device") = "cpu", py::arg("reference") = false,
     "(weights, ids): per row, w[t, j] / sum_j w[t, j] * scale[ids[t, j]] (MoE top-k weights renormalised, "
     "per-expert scale) with the ids, the row ordered by increasing id. w: [T, K] f32; ids: [T, K] i32; "
     "scale: [E] f32; out_w may be w and out_ids may be ids.");

  m.def("index_add", [](const py::object& out, const py::object& io, const py::object& so, const py::object& wo,
                        const std::string& device, bool reference) {
    Tensor y = as_tensor(out, "index_add", "out");
    Tensor index = as_tensor(io, "index_add", "index");
    Tensor src = as_tensor(so, "index_add", "src");
    std::optional<Tensor> weight = as_optional_tensor(wo, "index_add", "weight");
    run_ops(device, reference, [&](const Exec& ex) { ops::index_add(y, index, src, weight ? &*weight : nullptr, ex); });
    return y;
  }, py::arg("out"), py::arg("index"), py::arg("src"), py::arg("weight") = py::none(), py::kw_only(),
     py::arg("device") = "cpu", py::arg("reference") = false,
     "In place: out[index[i]] += weight[i] * src[i] for i in order (product rounded to f32 first). "
     "out: [R, D] f32; index: [n] i32; src: [n, D] f32; weight: [n] f32 or None. Returns out.");
}

Registrar reg_ops_moe("ops", bind_ops_moe);

}  // namespace
}  // namespace mb::py_bind
