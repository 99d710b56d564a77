// markbase._core.ops: linear, linear_gathered (ops/linear.h).
#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "backend/cpu/gemm.h"
#include "ops/linear.h"

namespace mb::py_bind {
namespace {

void bind_ops_linear(py::module_& m) {
  m.def("linear", [](const py::object& xo, const py::object& wo, const py::object& bo, const py::object& out,
                     const std::string& device, bool reference, bool bf16_products, bool row_invariant) {
    Tensor x = as_tensor(xo, "linear", "x");
    Tensor w = as_tensor(wo, "linear", "w");
    std::optional<Tensor> bias = as_optional_tensor(bo, "linear", "bias");
    // out: [..., N]; a malformed x or w gets a placeholder shape and is reported by the front door.
    Shape shape = x.shape();
    if (!shape.empty()) shape.back() = w.dim() == 2 ? w.size(0) : 0;
    Tensor y = out_or_empty(out, "linear", x.dtype(), shape);
    run_ops(device, reference, [&](const Exec& ex) {
      Exec e = ex;
      e.bf16_products = bf16_products;
      e.row_invariant = row_invariant;
      ops::linear(x, w, bias ? &*bias : nullptr, y, e);
    });
    return y;
  }, py::arg("x"), py::arg("w"), py::arg("bias") = py::none(), py::kw_only(), py::arg("out") = py::none(),
     py::arg("device") = "cpu", py::arg("reference") = false, py::arg("bf16_products") = false,
     py::arg("row_invariant") = false,
     "x · wᵀ + bias. x: [..., K] f32/bf16; w: [N, K] f32/bf16/f16; bias: [N]; out: [..., N] in x's dtype; "
     "f32 accumulation. bf16_products lets the CPU GEMM (more than 8 rows, bf16 w) round x to bf16 and "
     "multiply bf16 pairs where that is faster (_gemm_bf16_products()). row_invariant: each row of out as "
     "that row of x alone gives it, bit for bit (a batched decode step's linears).");
  m.def("_gemm_bf16_products", [] { return cpu::bf16_products_enabled(); },
        "Whether the CPU GEMM takes bf16_products here: AVX512_BF16 on AMD or with AMX, or MARKBASE_BF16_PRODUCTS=1.");
  m.def("_gemm_bf16_supported", [] { return cpu::bf16_products_supported(); }, "AVX512_BF16 usable here.");
  m.def("_set_gemm_bf16_products", [](int mode) { cpu::set_bf16_products(mode); }, py::arg("mode"),
        "Tests: 1 takes bf16 products wherever supported, 0 never, -1 back to the default rule.");
  m.def("_gemm_amx_supported", [] { return cpu::amx_bf16_supported(); },
        "AMX-BF16 tiles usable here (listed by CPUID, saved by the OS, granted to this process).");
  m.def("_gemm_amx", [] { return cpu::amx_bf16_enabled(); }, "Whether the bf16-products GEMM runs on AMX tiles.");
  m.def("_set_gemm_amx", [](int mode) { cpu::set_amx_bf16(mode); }, py::arg("mode"),
        "Tests / A-B runs: 0 keeps the bf16-products GEMM off AMX, 1 or -1 back to the default (AMX where supported).");

  m.def("linear_gathered", [](const py::object& xo, const py::object& wo, const py::object& io, const py::object& out,
                              const std::string& device, bool reference, bool bf16_products, bool row_invariant) {
    Tensor x = as_tensor(xo, "linear_gathered", "x");
    Tensor w = as_tensor(wo, "linear_gathered", "w");
    Tensor ids = as_tensor(io, "linear_gathered", "ids");
    // A malformed x or w gets a placeholder shape and is reported by the front door.
    Tensor y = out_or_empty(out, "linear_gathered", DType::F32, {x.dim() == 2 ? x.size(0) : 0, w.dim() == 3 ? w.size(1) : 0});
    run_ops(device, reference, [&](const Exec& ex) {
      Exec e = ex;
      e.bf16_products = bf16_products;
      e.row_invariant = row_invariant;
      ops::linear_gathered(x, w, ids, y, e);
    });
    return y;
  }, py::arg("x"), py::arg("w"), py::arg("ids"), py::kw_only(), py::arg("out") = py::none(),
     py::arg("device") = "cpu", py::arg("reference") = false, py::arg("bf16_products") = false,
     py::arg("row_invariant") = false,
     "out[r] = x[r] · w[ids[r]]ᵀ. x: [R, K] f32; w: [E, N, K] f32/bf16/f16; ids: [R] i32 in [0, E); "
     "out: [R, N] f32; f32 accumulation; bf16_products and row_invariant as linear().");
  m.def("_gemm_simd", [] { return std::string(cpu::gemm_kernel_name()); },
        "Micro-kernel of the CPU prefill GEMM: 'avx512' (MARKBASE_SIMD=avx2 keeps 'avx2'), 'avx2' or 'portable'.");
}

Registrar reg_ops_linear("ops", bind_ops_linear);

}  // namespace
}  // namespace mb::py_bind
