// markbase._core.ops: conv2d, depthwise_conv1d_causal (ops/conv.h).
#include <string>
#include <utility>

#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "core/errors.h"
#include "ops/conv.h"

namespace mb::py_bind {
namespace {

// An int, or a pair (h, w) of ints, as torch accepts for stride and padding.
std::pair<int64_t, int64_t> int_or_pair(const py::object& v, const char* op, const char* name) {
  if (py::isinstance<py::int_>(v)) {
    int64_t k = v.cast<int64_t>();
    return {k, k};
  }
  if (py::isinstance<py::sequence>(v) && !py::isinstance<py::str>(v)) {
    auto seq = v.cast<py::sequence>();
    if (seq.size() == 2 && py::isinstance<py::int_>(seq[0]) && py::isinstance<py::int_>(seq[1]))
      return {seq[0].cast<int64_t>(), seq[1].cast<int64_t>()};
  }
  throw InputError(cat(op, ": ", name, " must be an int or a pair of ints"));
}

void bind_ops_conv(py::module_& m) {
  m.def("conv2d", [](const py::object& xo, const py::object& wo, const py::object& bo, const py::object& stride,
                     const py::object& padding, const py::object& out, const std::string& device, bool reference) {
    Tensor x = as_tensor(xo, "conv2d", "x");
    Tensor w = as_tensor(wo, "conv2d", "w");
    Tensor bias = as_optional_tensor(bo, "conv2d", "bias").value_or(Tensor());
    ops::Conv2dParams p;
    std::tie(p.stride_h, p.stride_w) = int_or_pair(stride, "conv2d", "stride");
    std::tie(p.pad_h, p.pad_w) = int_or_pair(padding, "conv2d", "padding");
    Tensor y;
    if (out.is_none()) {
      // Shapes are validated by the front door; only allocate a fresh output when they make sense.
      if (x.dim() == 4 && w.dim() == 4 && p.stride_h >= 1 && p.stride_w >= 1 && p.pad_h >= 0 && p.pad_w >= 0)
        y = Tensor::empty(DType::F32, {x.size(0), w.size(0), ops::conv_out_size(x.size(2), w.size(2), p.stride_h, p.pad_h),
                                       ops::conv_out_size(x.size(3), w.size(3), p.stride_w, p.pad_w)});
    } else {
      y = as_tensor(out, "conv2d", "out");
    }
    run_ops(device, reference, [&](const Exec& ex) { ops::conv2d(x, w, bias, y, p, ex); });
    return y;
  }, py::arg("x"), py::arg("w"), py::arg("bias") = py::none(), py::kw_only(), py::arg("stride") = 1,
     py::arg("padding") = 0, py::arg("out") = py::none(), py::arg("device") = "cpu", py::arg("reference") = false,
     "2-D convolution as torch.nn.functional.conv2d: x [B, Cin, H, W] f32, w [Cout, Cin, kh, kw] "
     "f32/bf16/f16, bias [Cout] or None → [B, Cout, Ho, Wo] f32; stride / padding an int or (h, w).");

  m.def("depthwise_conv1d_causal", [](const py::object& xo, const py::object& wo, const py::object& out,
                                      const std::string& device, bool reference) {
    Tensor x = as_tensor(xo, "depthwise_conv1d_causal", "x");
    Tensor w = as_tensor(wo, "depthwise_conv1d_causal", "w");
    Tensor y = out_or_empty(out, "depthwise_conv1d_causal", DType::F32, x.shape());
    run_ops(device, reference, [&](const Exec& ex) { ops::depthwise_conv1d_causal(x, w, y, ex); });
    return y;
  }, py::arg("x"), py::arg("w"), py::kw_only(), py::arg("out") = py::none(), py::arg("device") = "cpu",
     py::arg("reference") = false,
     "out[t, c] = Σ_j w[c, 0, j]·x[t − (K−1) + j, c] (zero before t = 0): x [T, C] f32, w [C, 1, K] f32/bf16/f16.");
}

Registrar reg_ops_conv("ops", bind_ops_conv);

}  // namespace
}  // namespace mb::py_bind
