// markbase._core.ops: topk (ops/topk.h).
#include <algorithm>

#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "ops/topk.h"

namespace mb::py_bind {
namespace {

void bind_ops_topk(py::module_& m) {
  m.def("topk", [](const py::object& xo, int64_t k, const std::string& device, bool reference) {
    Tensor x = as_tensor(xo, "topk", "x");
    const int64_t R = x.dim() == 2 ? x.size(0) : 0, N = x.dim() == 2 ? x.size(1) : 0;
    // An out-of-range k is reported by the front door; never allocate for it.
    const int64_t kk = std::clamp<int64_t>(k, 0, N);
    Tensor values = Tensor::empty(DType::F32, {R, kk});
    Tensor indices = Tensor::empty(DType::I32, {R, kk});
    run_ops(device, reference, [&](const Exec& ex) { ops::topk(x, k, values, indices, ex); });
    return py::make_tuple(values, indices);
  }, py::arg("x"), py::arg("k"), py::kw_only(), py::arg("device") = "cpu", py::arg("reference") = false,
     "(values, indices) of the k largest entries of each row of x [R, N] f32: values [R, k] f32 descending, "
     "indices [R, k] i32; NaN ranks highest, ties keep the lower index first (as torch.topk).");
}

Registrar reg_ops_topk("ops", bind_ops_topk);

}  // namespace
}  // namespace mb::py_bind
