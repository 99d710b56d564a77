// markbase._core.ops: attention, local_attention (ops/attention.h).
#include "backend/cpu/attention.h"
#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "ops/attention.h"

namespace mb::py_bind {
namespace {

void bind_ops_attention(py::module_& m) {
  m.def("attention",
        [](const py::object& qo, const py::object& ko, const py::object& vo, const py::object& qpo, const py::object& kpo,
           const py::object& qbo, const py::object& kbo, float scale, float softcap, bool causal, int64_t window,
           bool block_overrides_window, const py::object& out, const std::string& device, bool reference) {
          const char* op = "attention";
          Tensor q = as_tensor(qo, op, "q");
          Tensor k = as_tensor(ko, op, "k");
          Tensor v = as_tensor(vo, op, "v");
          Tensor q_pos = as_tensor(qpo, op, "q_pos");
          Tensor k_pos = as_tensor(kpo, op, "k_pos");
          std::optional<Tensor> q_block = as_optional_tensor(qbo, op, "q_block");
          std::optional<Tensor> k_block = as_optional_tensor(kbo, op, "k_block");
          ops::AttentionParams p;
          p.scale = scale;
          p.softcap = softcap;
          p.causal = causal;
          p.window = window;
          p.block_overrides_window = block_overrides_window;
          // out: [T, Hq, d] like q (a malformed q is reported by the front door).
          Tensor y = out_or_empty(out, op, DType::F32, q.shape());
          run_ops(device, reference, [&](const Exec& ex) {
            ops::attention(q, k, v, q_pos, k_pos, q_block ? &*q_block : nullptr, k_block ? &*k_block : nullptr, y, p, ex);
          });
          return y;
        },
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("q_pos"), py::arg("k_pos"), py::kw_only(),
        py::arg("q_block") = py::none(), py::arg("k_block") = py::none(), py::arg("scale") = 1.0f,
        py::arg("softcap") = 0.0f, py::arg("causal") = true, py::arg("window") = 0,
        py::arg("block_overrides_window") = false, py::arg("out") = py::none(), py::arg("device") = "cpu",
        py::arg("reference") = false,
        "Softmax attention of q [T, Hq, d] over k, v [S, Hkv, d] (f32) with absolute positions q_pos [T], "
        "k_pos [S] (i32, -1 = empty slot), optional bidirectional block ids q_block [T], k_block [S]. "
        "Logits: softcap·tanh(scale·q·k / softcap) (no cap when softcap = 0). Allowed keys: k_pos >= 0 and "
        "(k_pos <= q_pos if causal, or same block) and k_pos > q_pos - window (window 0 = unlimited); with "
        "block_overrides_window the same block also bypasses the window (unified 12B). GQA: head h reads kv "
        "head h // (Hq / Hkv). Rows with no allowed key are zeros.");
  m.def("local_attention",
        [](const py::object& qo, const py::object& ko, const py::object& vo, const py::object& ro, float softcap,
           const py::object& out, const std::string& device, bool reference) {
          const char* op = "local_attention";
          Tensor q = as_tensor(qo, op, "q");
          Tensor k = as_tensor(ko, op, "k");
          Tensor v = as_tensor(vo, op, "v");
          Tensor rel = as_tensor(ro, op, "rel");
          Tensor y = out_or_empty(out, op, DType::F32, q.shape());
          run_ops(device, reference, [&](const Exec& ex) { ops::local_attention(q, k, v, rel, softcap, y, ex); });
          return y;
        },
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("rel"), py::kw_only(), py::arg("softcap") = 0.0f,
        py::arg("out") = py::none(), py::arg("device") = "cpu", py::arg("reference") = false,
        "Causal local attention with a relative-position key term (the audio conformer): q, k, v [T, H, d], "
        "rel [W, H, d] f32. Query t attends keys max(0, t-W+1) <= j <= t with logits "
        "softcap·tanh((q·k_j + q·rel[t-j]) / softcap) (no cap when softcap = 0), f32 softmax.");
  m.def("_attention_simd", [] { return std::string(cpu::attention_simd_name()); },
        "Inner loops of the fast CPU attention kernel: 'avx2' or 'portable' (MARKBASE_ATTENTION_SIMD=portable forces it).");
}

Registrar reg_ops_attention("ops", bind_ops_attention);

}  // namespace
}  // namespace mb::py_bind
