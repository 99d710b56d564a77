// markbase._core.gemma4: the text decoder and its sessions (driven by python/markbase/api.py).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "core/errors.h"
#include "models/gemma4/text_model.h"

namespace mb::py_bind {
namespace {

using gemma4::KvMode;
using gemma4::LayerConfig;
using gemma4::TextConfig;
using gemma4::TextModel;

// A session: one decoder state (caches, position, arena) bound to its model.
struct DecoderSession {
  std::shared_ptr<TextModel> model;
  std::unique_ptr<gemma4::DecoderState> state;
  int64_t max_context;
};

void bind(py::module_& m) {
  py::enum_<KvMode>(m, "KvMode").value("own", KvMode::Own).value("store", KvMode::Store).value("reuse", KvMode::Reuse);

  py::class_<LayerConfig>(m, "LayerConfig")
      .def(py::init<>())
      .def_readwrite("index", &LayerConfig::index)
      .def_readwrite("sliding", &LayerConfig::sliding)
      .def_readwrite("head_dim", &LayerConfig::head_dim)
      .def_readwrite("num_kv_heads", &LayerConfig::num_kv_heads)
      .def_readwrite("intermediate", &LayerConfig::intermediate)
      .def_readwrite("kv_mode", &LayerConfig::kv_mode)
      .def_readwrite("kv_source", &LayerConfig::kv_source)
      .def_readwrite("has_v_proj", &LayerConfig::has_v_proj)
      .def_readwrite("rope_kind", &LayerConfig::rope_kind)
      .def_readwrite("rope_theta", &LayerConfig::rope_theta)
      .def_readwrite("rope_partial", &LayerConfig::rope_partial);

  py::class_<TextConfig>(m, "TextConfig")
      .def(py::init<>())
      .def_readwrite("vocab", &TextConfig::vocab)
      .def_readwrite("hidden", &TextConfig::hidden)
      .def_readwrite("num_layers", &TextConfig::num_layers)
      .def_readwrite("num_heads", &TextConfig::num_heads)
      .def_readwrite("window", &TextConfig::window)
      .def_readwrite("eps", &TextConfig::eps)
      .def_readwrite("final_softcap", &TextConfig::final_softcap)
      .def_readwrite("embed_scale", &TextConfig::embed_scale)
      .def_readwrite("ple_dim", &TextConfig::ple_dim)
      .def_readwrite("ple_embed_scale", &TextConfig::ple_embed_scale)
      .def_readwrite("moe", &TextConfig::moe)
      .def_readwrite("num_experts", &TextConfig::num_experts)
      .def_readwrite("top_k", &TextConfig::top_k)
      .def_readwrite("moe_intermediate", &TextConfig::moe_intermediate)
      .def_readwrite("max_context", &TextConfig::max_context)
      .def_readwrite("max_chunk", &TextConfig::max_chunk)
      .def_readwrite("layers", &TextConfig::layers);

  py::class_<TextModel, std::shared_ptr<TextModel>>(m, "TextModel")
      .def(py::init([](const TextConfig& cfg, const py::dict& weights, const std::string& device) {
             std::map<std::string, Tensor> w;
             for (auto item : weights) w[item.first.cast<std::string>()] = as_tensor(item.second, "TextModel", "weights");
             return std::make_shared<TextModel>(cfg, w, make_exec(device, false));
           }),
           py::arg("config"), py::arg("weights"), py::arg("device") = "cpu");

  py::class_<DecoderSession>(m, "DecoderSession")
      .def(py::init([](std::shared_ptr<TextModel> model, int64_t max_context) {
             auto s = std::make_unique<DecoderSession>();
             s->state = model->new_state(max_context);
             s->model = std::move(model);
             s->max_context = max_context;
             return s;
           }),
           py::arg("model"), py::arg("max_context"))
      .def_property_readonly("position", [](const DecoderSession& s) { return s.state->position; })
      .def_property_readonly("max_context", [](const DecoderSession& s) { return s.max_context; })
      .def("reset", [](DecoderSession& s) {
        for (auto& c : s.state->caches) c.reset();
        s.state->position = 0;
      })
      .def("truncate", [](DecoderSession& s, int64_t n) {
        // Rolls the session back to its first n tokens; False (and unchanged) if a ring cannot.
        if (n < 0 || n > s.state->position) throw InputError(cat("truncate: ", n, " is outside [0, ", s.state->position, "]"));
        for (auto& c : s.state->caches)
          if (!c.can_truncate(n)) return false;
        for (auto& c : s.state->caches) c.truncate(n);
        s.state->position = n;
        return true;
      }, py::arg("n"))
      .def("cache_bytes", [](const DecoderSession& s) {
        size_t total = 0;
        for (const auto& c : s.state->caches) total += c.bytes();
        return total;
      })
      .def("forward", [](DecoderSession& s, const py::array_t<int32_t, py::array::c_style | py::array::forcecast>& ids,
                         bool all_logits) {
        std::vector<int32_t> v(ids.data(), ids.data() + ids.size());
        py::gil_scoped_release nogil;
        return s.model->forward(*s.state, v, all_logits);
      }, py::arg("ids"), py::arg("all_logits") = false);
}

Registrar reg("gemma4", bind);

}  // namespace
}  // namespace mb::py_bind
