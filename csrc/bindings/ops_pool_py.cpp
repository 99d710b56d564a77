// markbase._core.ops: avg_pool_indexed (ops/pool.h).
#include <algorithm>

#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "ops/pool.h"

namespace mb::py_bind {
namespace {

void bind_ops_pool(py::module_& m) {
  m.def("avg_pool_indexed", [](const py::object& xo, const py::object& io, int64_t num_out, float divisor,
                               const py::object& out, const std::string& device, bool reference) {
    Tensor x = as_tensor(xo, "avg_pool_indexed", "x");
    Tensor index = as_tensor(io, "avg_pool_indexed", "index");
    Tensor y = out_or_empty(out, "avg_pool_indexed", DType::F32, {std::max<int64_t>(num_out, 0), x.dim() == 2 ? x.size(1) : 0});
    run_ops(device, reference, [&](const Exec& ex) { ops::avg_pool_indexed(x, index, num_out, divisor, y, ex); });
    return y;
  }, py::arg("x"), py::arg("index"), py::kw_only(), py::arg("num_out"), py::arg("divisor"), py::arg("out") = py::none(),
     py::arg("device") = "cpu", py::arg("reference") = false,
     "out[m] = Σ_{n: index[n] == m} x[n] / divisor: x [N, D] f32, index [N] i32 (−1 skips a row) → [num_out, D] f32.");
}

Registrar reg_ops_pool("ops", bind_ops_pool);

}  // namespace
}  // namespace mb::py_bind
