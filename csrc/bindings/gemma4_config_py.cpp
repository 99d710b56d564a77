// markbase._core.gemma4: the parsed config (Hugging Face field names, read-only) and the weight table.
#include <pybind11/functional.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/dims_caster.h"
#include "bindings/registry.h"
#include "core/errors.h"
#include "models/gemma4/config.h"
#include "models/gemma4/model.h"
#include "models/gemma4/weights.h"

namespace mb::py_bind {
namespace {

namespace py = pybind11;
using namespace gemma4;

py::object optional_str(const std::string& s) {
  if (s.empty()) return py::none();
  return py::str(s);
}
py::tuple shape_tuple(const Shape& s) {
  py::tuple t(s.size());
  for (size_t i = 0; i < s.size(); ++i) t[i] = s[i];
  return t;
}

void bind_gemma4_config(py::module_& m) {
  py::class_<RopeParameters>(m, "RopeParameters")
      .def_readonly("rope_type", &RopeParameters::rope_type)
      .def_readonly("rope_theta", &RopeParameters::rope_theta)
      .def_readonly("partial_rotary_factor", &RopeParameters::partial_rotary_factor)
      .def(py::self == py::self)
      .def("__repr__", [](const RopeParameters& r) {
        return cat("RopeParameters(", r.rope_type, ", theta=", r.rope_theta, ", partial=", r.partial_rotary_factor, ")");
      });

  py::class_<LayerSpec>(m, "LayerSpec", "What one decoder layer is, derived from the text config.")
      .def_readonly("index", &LayerSpec::index)
      .def_readonly("layer_type", &LayerSpec::layer_type)
      .def_readonly("head_dim", &LayerSpec::head_dim)
      .def_readonly("num_key_value_heads", &LayerSpec::num_key_value_heads)
      .def_property_readonly("kv_mode", [](const LayerSpec& l) { return optional_str(l.kv_mode); },
                             "None (own cache), 'store' (own cache, shared) or 'reuse' (reads kv_source's)")
      .def_readonly("kv_source", &LayerSpec::kv_source)
      .def_readonly("intermediate_size", &LayerSpec::intermediate_size)
      .def_readonly("has_v_proj", &LayerSpec::has_v_proj)
      .def_readonly("rope", &LayerSpec::rope)
      .def_property_readonly("is_sliding", &LayerSpec::is_sliding)
      .def(py::self == py::self)
      .def("__repr__", [](const LayerSpec& l) {
        return cat("LayerSpec(", l.index, ", ", l.layer_type, ", head_dim=", l.head_dim, ", kv_heads=",
                   l.num_key_value_heads, l.kv_mode.empty() ? "" : ", " + l.kv_mode, ")");
      });

  py::class_<TextConfig>(m, "TextConfig")
      .def_readonly("model_type", &TextConfig::model_type)
      .def_readonly("vocab_size", &TextConfig::vocab_size)
      .def_readonly("hidden_size", &TextConfig::hidden_size)
      .def_readonly("intermediate_size", &TextConfig::intermediate_size)
      .def_readonly("num_hidden_layers", &TextConfig::num_hidden_layers)
      .def_readonly("num_attention_heads", &TextConfig::num_attention_heads)
      .def_readonly("num_key_value_heads", &TextConfig::num_key_value_heads)
      .def_readonly("head_dim", &TextConfig::head_dim)
      .def_readonly("hidden_activation", &TextConfig::hidden_activation)
      .def_readonly("max_position_embeddings", &TextConfig::max_position_embeddings)
      .def_readonly("rms_norm_eps", &TextConfig::rms_norm_eps)
      .def_readonly("sliding_window", &TextConfig::sliding_window)
      .def_readonly("final_logit_softcapping", &TextConfig::final_logit_softcapping)
      .def_readonly("use_bidirectional_attention", &TextConfig::use_bidirectional_attention)
      .def_readonly("vocab_size_per_layer_input", &TextConfig::vocab_size_per_layer_input)
      .def_readonly("hidden_size_per_layer_input", &TextConfig::hidden_size_per_layer_input)
      .def_readonly("attention_k_eq_v", &TextConfig::attention_k_eq_v)
      .def_readonly("global_head_dim", &TextConfig::global_head_dim)
      .def_readonly("num_global_key_value_heads", &TextConfig::num_global_key_value_heads)
      .def_readonly("num_kv_shared_layers", &TextConfig::num_kv_shared_layers)
      .def_readonly("enable_moe_block", &TextConfig::enable_moe_block)
      .def_readonly("use_double_wide_mlp", &TextConfig::use_double_wide_mlp)
      .def_readonly("num_experts", &TextConfig::num_experts)
      .def_readonly("top_k_experts", &TextConfig::top_k_experts)
      .def_readonly("moe_intermediate_size", &TextConfig::moe_intermediate_size)
      .def_readonly("tie_word_embeddings", &TextConfig::tie_word_embeddings)
      .def_readonly("pad_token_id", &TextConfig::pad_token_id)
      .def_readonly("bos_token_id", &TextConfig::bos_token_id)
      .def_readonly("eos_token_id", &TextConfig::eos_token_id)
      .def_readonly("layer_types", &TextConfig::layer_types)
      .def_readonly("rope_parameters", &TextConfig::rope_parameters)
      .def_readonly("layers", &TextConfig::layers)
      .def_property_readonly("has_ple", &TextConfig::has_ple)
      .def_property_readonly("first_kv_shared_layer", &TextConfig::first_kv_shared_layer);

  py::class_<VisionConfig>(m, "VisionConfig")
      .def_readonly("hidden_size", &VisionConfig::hidden_size)
      .def_readonly("intermediate_size", &VisionConfig::intermediate_size)
      .def_readonly("num_hidden_layers", &VisionConfig::num_hidden_layers)
      .def_readonly("num_attention_heads", &VisionConfig::num_attention_heads)
      .def_readonly("num_key_value_heads", &VisionConfig::num_key_value_heads)
      .def_readonly("head_dim", &VisionConfig::head_dim)
      .def_readonly("hidden_activation", &VisionConfig::hidden_activation)
      .def_readonly("rms_norm_eps", &VisionConfig::rms_norm_eps)
      .def_readonly("pooling_kernel_size", &VisionConfig::pooling_kernel_size)
      .def_readonly("patch_size", &VisionConfig::patch_size)
      .def_readonly("position_embedding_size", &VisionConfig::position_embedding_size)
      .def_readonly("use_clipped_linears", &VisionConfig::use_clipped_linears)
      .def_readonly("standardize", &VisionConfig::standardize)
      .def_readonly("rope_parameters", &VisionConfig::rope_parameters);

  py::class_<AudioConfig>(m, "AudioConfig")
      .def_readonly("hidden_size", &AudioConfig::hidden_size)
      .def_readonly("num_hidden_layers", &AudioConfig::num_hidden_layers)
      .def_readonly("num_attention_heads", &AudioConfig::num_attention_heads)
      .def_readonly("hidden_act", &AudioConfig::hidden_act)
      .def_readonly("subsampling_conv_channels", &AudioConfig::subsampling_conv_channels)
      .def_readonly("conv_kernel_size", &AudioConfig::conv_kernel_size)
      .def_readonly("residual_weight", &AudioConfig::residual_weight)
      .def_readonly("attention_chunk_size", &AudioConfig::attention_chunk_size)
      .def_readonly("attention_context_left", &AudioConfig::attention_context_left)
      .def_readonly("attention_context_right", &AudioConfig::attention_context_right)
      .def_readonly("attention_logit_cap", &AudioConfig::attention_logit_cap)
      .def_readonly("attention_invalid_logits_value", &AudioConfig::attention_invalid_logits_value)
      .def_readonly("use_clipped_linears", &AudioConfig::use_clipped_linears)
      .def_readonly("rms_norm_eps", &AudioConfig::rms_norm_eps)
      .def_readonly("gradient_clipping", &AudioConfig::gradient_clipping)
      .def_readonly("output_proj_dims", &AudioConfig::output_proj_dims);

  py::class_<UnifiedVisionConfig>(m, "UnifiedVisionConfig")
      .def_readonly("patch_size", &UnifiedVisionConfig::patch_size)
      .def_readonly("pooling_kernel_size", &UnifiedVisionConfig::pooling_kernel_size)
      .def_readonly("mm_embed_dim", &UnifiedVisionConfig::mm_embed_dim)
      .def_readonly("mm_posemb_size", &UnifiedVisionConfig::mm_posemb_size)
      .def_readonly("rms_norm_eps", &UnifiedVisionConfig::rms_norm_eps)
      .def_readonly("output_proj_dims", &UnifiedVisionConfig::output_proj_dims)
      .def_property_readonly("model_patch_size", &UnifiedVisionConfig::model_patch_size);

  py::class_<UnifiedAudioConfig>(m, "UnifiedAudioConfig")
      .def_readonly("audio_embed_dim", &UnifiedAudioConfig::audio_embed_dim)
      .def_readonly("rms_norm_eps", &UnifiedAudioConfig::rms_norm_eps);

  py::class_<Gemma4Config>(m, "Gemma4Config", "A parsed config.json (transformers' field names).")
      .def_readonly("model_type", &Gemma4Config::model_type)
      .def_readonly("text_config", &Gemma4Config::text_config)
      // vision_config / audio_config: the ViT and conformer configs of gemma4, the embedder configs of
      // gemma4_unified (as in config.json), None when absent.
      .def_property_readonly("vision_config", [](const Gemma4Config& c) -> py::object {
        if (c.vision_config) return py::cast(*c.vision_config);
        if (c.unified_vision_config) return py::cast(*c.unified_vision_config);
        return py::none();
      })
      .def_property_readonly("audio_config", [](const Gemma4Config& c) -> py::object {
        if (c.audio_config) return py::cast(*c.audio_config);
        if (c.unified_audio_config) return py::cast(*c.unified_audio_config);
        return py::none();
      })
      .def_readonly("boi_token_id", &Gemma4Config::boi_token_id)
      .def_readonly("eoi_token_id", &Gemma4Config::eoi_token_id)
      .def_readonly("image_token_id", &Gemma4Config::image_token_id)
      .def_readonly("video_token_id", &Gemma4Config::video_token_id)
      .def_readonly("boa_token_id", &Gemma4Config::boa_token_id)
      .def_readonly("eoa_token_index", &Gemma4Config::eoa_token_index)
      .def_readonly("audio_token_id", &Gemma4Config::audio_token_id)
      .def_readonly("eos_token_id", &Gemma4Config::eos_token_id)
      .def_property_readonly("is_unified", &Gemma4Config::is_unified)
      .def_property_readonly("family", &Gemma4Config::family)
      .def_property_readonly("placeholder_token_ids", &Gemma4Config::placeholder_token_ids)
      .def("__repr__", [](const Gemma4Config& c) { return cat("Gemma4Config(", c.family(), ", model_type=", c.model_type, ")"); });

  m.def("parse_config", &parse_config, py::arg("json_text"), py::arg("where") = "config.json",
        "Parses config.json text (ConfigError naming the field on any inconsistency).");
  m.def("load_config", &load_config, py::arg("path"), "Reads DIR/config.json (or that file).");

  py::class_<WeightSpec>(m, "WeightSpec", "One tensor of the weight table.")
      .def_readonly("name", &WeightSpec::name)
      .def_property_readonly("shape", [](const WeightSpec& s) { return shape_tuple(s.shape); })
      .def_readonly("component", &WeightSpec::component)
      .def_property_readonly("layer", [](const WeightSpec& s) -> py::object {
        if (s.layer < 0) return py::none();
        return py::int_(s.layer);
      })
      .def_property_readonly("role", [](const WeightSpec& s) {
        return s.role == WeightRole::Required ? "required" : "ignored";
      })
      .def_property_readonly("aliases", [](const WeightSpec& s) { return py::tuple(py::cast(s.aliases)); })
      .def_property_readonly("required", &WeightSpec::required)
      .def_property_readonly("split_halves", [](const WeightSpec& s) { return py::tuple(py::cast(s.split_halves)); },
                             "pairs of names MLX stores this matrix's two halves (along dim -2) under")
      .def_readonly("linear", &WeightSpec::linear, "held as a matrix that may be stored MLX-quantized")
      .def_property_readonly("quant", [](const WeightSpec& s) {
        return s.quant == QuantRule::Matrix ? "matrix" : s.quant == QuantRule::Table ? "table"
               : s.quant == QuantRule::Gathered ? "gathered" : "keep";
      }, "what load-time quantization does: 'matrix' (to the requested bits), 'table' (8 bits), 'keep' or "
         "'gathered' (stays as stored; a gathered-only table also keeps an MLX width the linear kernels lack)")
      .def("__repr__", [](const WeightSpec& s) { return cat("WeightSpec(", s.name, ", ", shape_str(s.shape), ")"); });

  m.def("weight_table", &weight_table, py::arg("config"),
        "Every tensor a checkpoint of this config holds (plus the ignorable ones): the list `validate` checks "
        "and `load` binds.");
  m.def("_set_weight_filter", [](std::optional<std::function<bool(const WeightSpec&)>> f) {
        // Test seam: the Python callable runs during the walk, which holds no GIL-released section.
        set_weight_filter(f ? WeightFilter(*f) : WeightFilter());
      }, py::arg("keep"),
      "Test seam: drop the table entries `keep(spec)` rejects from every walk (validate and load), as if "
      "deleted from the visit functions; None restores the full table.");
}

Registrar reg_gemma4_config("gemma4", bind_gemma4_config, 40);

}  // namespace
}  // namespace mb::py_bind
