// markbase._core.ops: convolutions (conv2d, depthwise_conv1d_causal), index-mapped average pooling and
// the materialising shape ops (copy, concat).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "core/errors.h"
#include "ops/conv.h"
#include "ops/pool.h"
#include "ops/shape.h"

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

void bind(py::module_& m) {
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

  m.def("copy", [](const py::object& so, const py::object& out, const std::optional<std::string>& dtype,
                   const std::string& device, bool reference) {
    Tensor src = as_tensor(so, "copy", "src");
    Tensor y;
    if (out.is_none()) y = Tensor::empty(dtype ? dtype_from_name(*dtype) : src.dtype(), src.shape());
    else y = as_tensor(out, "copy", "out");
    if (dtype && y.dtype() != dtype_from_name(*dtype))
      throw InputError(cat("copy: out has dtype ", dtype_name(y.dtype()), " but dtype='", *dtype, "' was requested"));
    run_ops(device, reference, [&](const Exec& ex) { ops::copy(src, y, ex); });
    return y;
  }, py::arg("src"), py::kw_only(), py::arg("out") = py::none(), py::arg("dtype") = py::none(),
     py::arg("device") = "cpu", py::arg("reference") = false,
     "A contiguous copy of any (strided) view; converts among f32 / bf16 / f16 when out (or dtype) differs.");

  m.def("concat", [](const py::sequence& seq, int64_t dim, const py::object& out, const std::string& device,
                     bool reference) {
    std::vector<Tensor> tensors;
    tensors.reserve(seq.size());
    for (size_t i = 0; i < seq.size(); ++i) {
      const std::string name = cat("tensors[", i, "]");
      tensors.push_back(as_tensor(seq[i], "concat", name.c_str()));
    }
    Tensor y;
    if (out.is_none()) {
      if (tensors.empty()) throw InputError("concat: tensors is empty (need at least one tensor)");
      const Tensor& t0 = tensors[0];
      const int64_t rank = t0.dim();
      if (rank == 0 || dim < -rank || dim >= rank)
        throw InputError(cat("concat: dim ", dim, " is out of range for rank ", rank));
      Shape shape = t0.shape();
      const size_t d = size_t(dim < 0 ? dim + rank : dim);
      shape[d] = 0;
      for (const Tensor& t : tensors) shape[d] += t.dim() == rank ? t.size(int64_t(d)) : 0;
      y = Tensor::empty(t0.dtype(), shape);
    } else {
      y = as_tensor(out, "concat", "out");
    }
    run_ops(device, reference, [&](const Exec& ex) { ops::concat(tensors, dim, y, ex); });
    return y;
  }, py::arg("tensors"), py::arg("dim"), py::kw_only(), py::arg("out") = py::none(), py::arg("device") = "cpu",
     py::arg("reference") = false, "The tensors (one dtype, any strides) joined along dim into a contiguous tensor.");
}

Registrar reg("ops", bind);

}  // namespace
}  // namespace mb::py_bind
