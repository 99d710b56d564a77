// The toy backend: device "toy", compiled in only with MARKBASE_TEST_BACKENDS (CMakeLists.txt, default
// ON), proving that a backend is additive: this folder is the whole change — it edits no op front door,
// no model code and no shared file. It runs every op with the cpu backend's kernels and counts the ops it
// ran; markbase._core._toy reads the counts, and records what the op observer (ops/observer.h) is told.
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backend/registry.h"
#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "core/errors.h"
#include "ops/observer.h"

namespace mb::toy {
namespace {

namespace py = pybind11;

class ToyBackend final : public Backend {
 public:
  const char* name() const override { return "toy"; }
  void synchronize() const override { count("synchronize"); }

  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out,
              const ops::LinearParams& p) const override {
    cpu("linear").linear(x, w, bias, out, p);
  }
  void linear_gathered(const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out,
                       const ops::LinearParams& p) const override {
    cpu("linear_gathered").linear_gathered(x, w, ids, out, p);
  }
  void linear_quantized(const Tensor& x, const ops::QuantizedMatrix& w, const Tensor* bias, Tensor& out,
                        const ops::LinearParams& p) const override {
    cpu("linear_quantized").linear_quantized(x, w, bias, out, p);
  }
  void linear_quantized_gathered(const Tensor& x, const ops::QuantizedMatrix& w, const Tensor& ids, Tensor& out,
                                 const ops::LinearParams& p) const override {
    cpu("linear_quantized_gathered").linear_quantized_gathered(x, w, ids, out, p);
  }
  void embedding_quantized(const ops::QuantizedMatrix& table, const Tensor& ids, Tensor& out, float scale) const override {
    cpu("embedding_quantized").embedding_quantized(table, ids, out, scale);
  }
  void embedding(const Tensor& table, const Tensor& ids, Tensor& out, float scale) const override {
    cpu("embedding").embedding(table, ids, out, scale);
  }
  void topk(const Tensor& x, int64_t k, Tensor& values, Tensor& indices) const override {
    cpu("topk").topk(x, k, values, indices);
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                 const Tensor* q_block, const Tensor* k_block, Tensor& out,
                 const ops::AttentionParams& p) const override {
    cpu("attention").attention(q, k, v, q_pos, k_pos, q_block, k_block, out, p);
  }
  void local_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& rel, float softcap,
                       Tensor& out) const override {
    cpu("local_attention").local_attention(q, k, v, rel, softcap, out);
  }
  void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
              const ops::Conv2dParams& p) const override {
    cpu("conv2d").conv2d(x, w, bias, out, p);
  }
  void depthwise_conv1d_causal(const Tensor& x, const Tensor& w, Tensor& out) const override {
    cpu("depthwise_conv1d_causal").depthwise_conv1d_causal(x, w, out);
  }
  void unary(const Tensor& x, Tensor& out, const ops::UnaryParams& p) const override {
    cpu(ops::unary_name(p.kind)).unary(x, out, p);
  }
  void binary(const Tensor& a, const Tensor& b, Tensor& out, ops::BinaryKind kind) const override {
    cpu(kind == ops::BinaryKind::Add ? "add" : "mul").binary(a, b, out, kind);
  }
  void route_weights(const Tensor& w, const Tensor& ids, const Tensor& scale, Tensor& out_w,
                     Tensor& out_ids) const override {
    cpu("route_weights").route_weights(w, ids, scale, out_w, out_ids);
  }
  void index_add(Tensor& out, const Tensor& index, const Tensor& src, const Tensor* weight) const override {
    cpu("index_add").index_add(out, index, src, weight);
  }
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) const override {
    cpu("rms_norm").rms_norm(x, weight, eps, out);
  }
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out) const override {
    cpu("layer_norm").layer_norm(x, weight, bias, eps, out);
  }
  void softmax(const Tensor& x, Tensor& out) const override { cpu("softmax").softmax(x, out); }
  void avg_pool_indexed(const Tensor& x, const Tensor& index, float divisor, Tensor& out) const override {
    cpu("avg_pool_indexed").avg_pool_indexed(x, index, divisor, out);
  }
  void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& out) const override {
    cpu("rope").rope(x, positions, inv_freq, out);
  }
  void rope_2d(const Tensor& x, const Tensor& positions, const std::vector<float>& inv_freq,
               Tensor& out) const override {
    cpu("rope_2d").rope_2d(x, positions, inv_freq, out);
  }
  void copy(const Tensor& src, Tensor& out) const override { cpu("copy").copy(src, out); }
  void concat(const std::vector<Tensor>& tensors, int64_t dim, Tensor& out) const override {
    cpu("concat").concat(tensors, dim, out);
  }

  std::map<std::string, int64_t> counts() const {
    std::lock_guard<std::mutex> lk(mu_);
    return counts_;
  }
  void reset() const {
    std::lock_guard<std::mutex> lk(mu_);
    counts_.clear();
  }

 private:
  void count(const char* what) const {
    std::lock_guard<std::mutex> lk(mu_);
    ++counts_[what];
  }
  // Counts `op` and returns the backend that runs it.
  const Backend& cpu(const char* op) const {
    count(op);
    return backend_for("cpu");
  }

  mutable std::mutex mu_;
  mutable std::map<std::string, int64_t> counts_;
};

const ToyBackend toy_backend;
// Not listed: devices() does not offer it, but device="toy" runs.
const BackendRegistrar reg(toy_backend, /*preference=*/100, /*listed=*/false);

// Records what the op observer is told: (op, backend, input shapes, output shapes); None for an
// undefined (absent) tensor.
class Recorder final : public ops::OpObserver {
 public:
  using Shapes = std::vector<std::optional<Shape>>;
  using Record = std::tuple<std::string, std::string, Shapes, Shapes>;

  void after_op(const char* op, const Backend& backend, std::span<const Tensor> inputs,
                std::span<const Tensor> outputs) override {
    std::lock_guard<std::mutex> lk(mu_);
    records_.emplace_back(op, backend.name(), shapes(inputs), shapes(outputs));
  }
  std::vector<Record> take() {
    std::lock_guard<std::mutex> lk(mu_);
    return std::move(records_);
  }

 private:
  static Shapes shapes(std::span<const Tensor> ts) {
    Shapes out;
    for (const Tensor& t : ts) out.push_back(t.defined() ? std::optional<Shape>(t.shape()) : std::nullopt);
    return out;
  }
  std::mutex mu_;
  std::vector<Record> records_;
};

Recorder recorder;

void bind(py::module_& m) {
  m.doc() = "Test hooks: the toy backend's op counts (device=\"toy\") and an op-observer recorder.";
  m.def("op_counts", [] { return toy_backend.counts(); }, "Ops (and synchronize calls) the toy backend ran, by name.");
  m.def("reset", [] { toy_backend.reset(); }, "Zeroes the toy backend's counts.");
  m.def("start_recording", [] {
    recorder.take();
    if (ops::OpObserver* prev = ops::set_op_observer(&recorder); prev && prev != &recorder) {
      ops::set_op_observer(prev);
      throw InputError("_toy: another op observer is installed");
    }
  }, "Installs an op observer that records every op.");
  m.def("stop_recording", [] {
    ops::set_op_observer(nullptr);
    return recorder.take();
  }, "Uninstalls it; returns [(op, backend, input shapes, output shapes)], None for an absent tensor.");
}

py_bind::Registrar bind_reg("_toy", bind);

}  // namespace
}  // namespace mb::toy
