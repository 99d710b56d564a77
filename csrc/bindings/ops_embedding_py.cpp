// markbase._core.ops: embedding (ops/embedding.h).
#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "ops/embedding.h"

namespace mb::py_bind {
namespace {

void bind_ops_embedding(py::module_& m) {
  m.def("embedding", [](const py::object& to, const py::object& io, float scale, const py::object& out,
                        const std::string& out_dtype, const std::string& device, bool reference) {
    Tensor table = as_tensor(to, "embedding", "table");
    Tensor ids = as_tensor(io, "embedding", "ids");
    Shape shape{ids.dim() >= 1 ? ids.size(0) : 0, table.dim() == 2 ? table.size(1) : 0};
    Tensor y = out_or_empty(out, "embedding", dtype_from_name(out_dtype), shape);
    run_ops(device, reference, [&](const Exec& ex) { ops::embedding(table, ids, y, scale, ex); });
    return y;
  }, py::arg("table"), py::arg("ids"), py::kw_only(), py::arg("scale") = 1.0f, py::arg("out") = py::none(),
     py::arg("out_dtype") = "f32", py::arg("device") = "cpu", py::arg("reference") = false,
     "out[t] = f32(table[ids[t]]) * scale. table: [V, D] f32/bf16/f16; ids: [T] i32/i64; out: [T, D] f32 or "
     "bf16 (out_dtype; when `out` is given its dtype is used).");
}

Registrar reg_ops_embedding("ops", bind_ops_embedding);

}  // namespace
}  // namespace mb::py_bind
