// markbase._core.ops: linear, embedding, topk.
#include <algorithm>

#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/topk.h"

namespace mb::py_bind {
namespace {

void bind(py::module_& m) {
  m.def("linear", [](const py::object& xo, const py::object& wo, const py::object& bo, const py::object& out,
                     const std::string& device, bool reference) {
    Tensor x = as_tensor(xo, "linear", "x");
    Tensor w = as_tensor(wo, "linear", "w");
    std::optional<Tensor> bias = as_optional_tensor(bo, "linear", "bias");
    // out: [..., N]; a malformed x or w gets a placeholder shape and is reported by the front door.
    Shape shape = x.shape();
    if (!shape.empty()) shape.back() = w.dim() == 2 ? w.size(0) : 0;
    Tensor y = out_or_empty(out, "linear", x.dtype(), shape);
    run_ops(device, reference, [&](const Exec& ex) { ops::linear(x, w, bias ? &*bias : nullptr, y, ex); });
    return y;
  }, py::arg("x"), py::arg("w"), py::arg("bias") = py::none(), py::kw_only(), py::arg("out") = py::none(),
     py::arg("device") = "cpu", py::arg("reference") = false,
     "x · wᵀ + bias. x: [..., K] f32/bf16; w: [N, K] f32/bf16/f16; bias: [N]; out: [..., N] in x's dtype; "
     "f32 accumulation.");

  m.def("linear_gathered", [](const py::object& xo, const py::object& wo, const py::object& io, const py::object& out,
                              const std::string& device, bool reference) {
    Tensor x = as_tensor(xo, "linear_gathered", "x");
    Tensor w = as_tensor(wo, "linear_gathered", "w");
    Tensor ids = as_tensor(io, "linear_gathered", "ids");
    // A malformed x or w gets a placeholder shape and is reported by the front door.
    Tensor y = out_or_empty(out, "linear_gathered", DType::F32, {x.dim() == 2 ? x.size(0) : 0, w.dim() == 3 ? w.size(1) : 0});
    run_ops(device, reference, [&](const Exec& ex) { ops::linear_gathered(x, w, ids, y, ex); });
    return y;
  }, py::arg("x"), py::arg("w"), py::arg("ids"), py::kw_only(), py::arg("out") = py::none(),
     py::arg("device") = "cpu", py::arg("reference") = false,
     "out[r] = x[r] · w[ids[r]]ᵀ. x: [R, K] f32; w: [E, N, K] f32/bf16/f16; ids: [R] i32 in [0, E); "
     "out: [R, N] f32; f32 accumulation.");

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

Registrar reg("ops", bind);

}  // namespace
}  // namespace mb::py_bind
