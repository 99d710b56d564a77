// markbase._core.ops: quantize, dequantize, linear_quantized(_gathered), embedding_quantized (ops/quant.h).
#include <string>

#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/simd.h"
#include "ops/quant.h"

namespace mb::py_bind {
namespace {

ops::QuantizedMatrix matrix_of(const py::object& q, const py::object& scales, const py::object& biases, int bits,
                               int group_size, const char* op) {
  ops::QuantizedMatrix m;
  m.q = as_tensor(q, op, "q");
  m.scales = as_tensor(scales, op, "scales");
  m.biases = as_tensor(biases, op, "biases");
  m.bits = bits;
  m.group_size = group_size;
  return m;
}

void bind_ops_quant(py::module_& m) {
  m.def("quantize", [](const py::object& wo, int bits, int group_size, const std::string& scale_dtype) {
    Tensor w = as_tensor(wo, "quantize", "w");
    ops::QuantizedMatrix q;
    {
      py::gil_scoped_release nogil;
      q = ops::quantize_affine(w, bits, group_size, dtype_from_name(scale_dtype));
    }
    return py::make_tuple(q.q, q.scales, q.biases);
  }, py::arg("w"), py::kw_only(), py::arg("bits") = 4, py::arg("group_size") = 64, py::arg("scale_dtype") = "bf16",
     "MLX's affine quantization of w [rows, cols] (f32 / bf16 / f16): (q u8 [rows, cols·bits/8], scales, biases "
     "[rows, cols/group_size] as scale_dtype); w ≈ scales·q + biases per group.");
  m.def("dequantize", [](const py::object& q, const py::object& s, const py::object& b, int bits, int group_size) {
    return ops::dequantize_affine(matrix_of(q, s, b, bits, group_size, "dequantize"));
  }, py::arg("q"), py::arg("scales"), py::arg("biases"), py::kw_only(), py::arg("bits"), py::arg("group_size"),
     "f32 [rows, cols] = scales·q + biases (any MLX width: 1-6 or 8 bits).");
  m.def("widen_affine_bits", [](const py::object& packed, int64_t K, int bits) {
    Tensor p = as_tensor(packed, "widen_affine_bits", "packed");
    py::gil_scoped_release nogil;
    return ops::widen_affine_bits(p, K, bits);
  }, py::arg("packed"), py::kw_only(), py::arg("cols"), py::arg("bits"),
     "MLX's packed rows of `cols` values at 1-6 bits (u8 [.., cols·bits/8], a little-endian bit stream) widened "
     "exactly to the kernels' width: 4-bit nibbles for bits ≤ 4, bytes for 5 and 6 (u8 [.., cols·held/8]).");
  m.def("linear_quantized", [](const py::object& xo, const py::object& q, const py::object& s, const py::object& b,
                               int bits, int group_size, const py::object& bo, const py::object& out,
                               const std::string& device, bool reference, bool int16_activations,
                               bool int8_activations, bool row_invariant) {
    const char* op = "linear_quantized";
    Tensor x = as_tensor(xo, op, "x");
    ops::QuantizedMatrix w = matrix_of(q, s, b, bits, group_size, op);
    std::optional<Tensor> bias = as_optional_tensor(bo, op, "bias");
    Shape shape = x.shape();
    if (!shape.empty() && w.q.dim() == 2) shape.back() = w.q.size(0);
    Tensor y = out_or_empty(out, op, DType::F32, shape);
    run_ops(device, reference, [&](const Exec& ex) {
      Exec e = ex;
      e.int16_activations = int16_activations;
      e.int8_activations = int8_activations;
      e.row_invariant = row_invariant;
      ops::linear_quantized(x, w, bias ? &*bias : nullptr, y, e);
    });
    return y;
  }, py::arg("x"), py::arg("q"), py::arg("scales"), py::arg("biases"), py::kw_only(), py::arg("bits"),
     py::arg("group_size"), py::arg("bias") = py::none(), py::arg("out") = py::none(), py::arg("device") = "cpu",
     py::arg("reference") = false, py::arg("int16_activations") = false, py::arg("int8_activations") = false,
     py::arg("row_invariant") = false,
     "x [..., K] f32 times the dequantized [N, K] matrix transposed (+ bias): [..., N] f32. int16_activations "
     "lets the CPU decode kernel round x per group to 16-bit integers (ops/quant.h); int8_activations lets "
     "its rows with 4-bit weights on AVX-512 VNNI round x to 8-bit integers instead (the rest as int16_activations). "
     "row_invariant: each row of out as that row of x alone gives it, bit for bit.");
  m.def("linear_quantized_gathered", [](const py::object& xo, const py::object& q, const py::object& s,
                                        const py::object& b, const py::object& ido, int bits, int group_size,
                                        const py::object& out, const std::string& device, bool reference,
                                        bool int16_activations, bool int8_activations) {
    const char* op = "linear_quantized_gathered";
    Tensor x = as_tensor(xo, op, "x");
    ops::QuantizedMatrix w = matrix_of(q, s, b, bits, group_size, op);
    Tensor ids = as_tensor(ido, op, "ids");
    const int64_t R = x.dim() == 2 ? x.size(0) : 0, N = w.q.dim() == 3 ? w.q.size(1) : 0;
    Tensor y = out_or_empty(out, op, DType::F32, {R, N});
    run_ops(device, reference, [&](const Exec& ex) {
      Exec e = ex;
      e.int16_activations = int16_activations;
      e.int8_activations = int8_activations;
      ops::linear_quantized_gathered(x, w, ids, y, e);
    });
    return y;
  }, py::arg("x"), py::arg("q"), py::arg("scales"), py::arg("biases"), py::arg("ids"), py::kw_only(),
     py::arg("bits"), py::arg("group_size"), py::arg("out") = py::none(), py::arg("device") = "cpu",
     py::arg("reference") = false, py::arg("int16_activations") = false, py::arg("int8_activations") = false,
     "Row r of x [R, K] f32 through matrix ids[r] of the stacked quantized matrices (q [E, N, K·bits/8], "
     "scales / biases [E, N, K/group_size]): [R, N] f32, each row as linear_quantized computes it alone.");
  m.def("_quant_gemv_simd", [] {
    return std::string(cpu::cpu_has_avx512_vnni() ? "avx512-vnni" : cpu::cpu_has_avx2() ? "avx2" : "portable");
  }, "Kernels of the CPU quantized decode GEMV: 'avx512-vnni' (16-bit activations on AVX-512 VNNI for groups of "
     "64 and more; AVX2 otherwise), 'avx2' (MARKBASE_SIMD=avx2 forces it) or 'portable' (f32 only; "
     "MARKBASE_SIMD=off forces it).");
  m.def("_set_quant_gemv_bytes", [](int mode) { cpu::set_quant_gemv_bytes(mode); }, py::arg("mode"),
        "1: the decode GEMV takes the byte kernel (x16 split into bytes, vpdpbusd) where AVX-512 VNNI is present; "
        "0: the 16-bit-lane kernels; -1: back to MARKBASE_QGEMV_BYTES (default on). For tests and A/B runs.");
  m.def("_quant_gemv_bytes", [] { return cpu::quant_gemv_bytes_enabled(); },
        "True when the decode GEMV takes the byte kernel (see _set_quant_gemv_bytes).");
  m.def("embedding_quantized", [](const py::object& q, const py::object& s, const py::object& b, int bits,
                                  int group_size, const py::object& ido, float scale, const py::object& out,
                                  const std::string& device, bool reference) {
    const char* op = "embedding_quantized";
    ops::QuantizedMatrix t = matrix_of(q, s, b, bits, group_size, op);
    Tensor ids = as_tensor(ido, op, "ids");
    const int64_t cols = t.q.dim() == 2 && bits >= 1 && bits <= 8 ? t.q.size(1) * 8 / bits : 0;
    Tensor y = out_or_empty(out, op, DType::F32, {ids.dim() == 1 ? ids.size(0) : 0, cols});
    run_ops(device, reference, [&](const Exec& ex) { ops::embedding_quantized(t, ids, y, scale, ex); });
    return y;
  }, py::arg("q"), py::arg("scales"), py::arg("biases"), py::kw_only(), py::arg("bits"), py::arg("group_size"),
     py::arg("ids"), py::arg("scale") = 1.0f, py::arg("out") = py::none(), py::arg("device") = "cpu",
     py::arg("reference") = false, "Rows ids of the dequantized table (any MLX width: 1-6 or 8 bits), times scale: [T, cols] f32.");
}

Registrar reg_ops_quant("ops", bind_ops_quant);

}  // namespace
}  // namespace mb::py_bind
