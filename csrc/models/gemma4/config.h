// Gemma 4 configuration, parsed from config.json (model_type gemma4, gemma4_unified, or text-only
// gemma4_text / gemma4_unified_text). Every field keeps its Hugging Face name and transformers 5.23's
// class default, from the JSON through to the forward pass and the Python API; derived per-layer facts
// (LayerSpec) are computed here once. Both forms found in the wild are accepted: the published one
// (`global_head_dim`, `num_global_key_value_heads`) and the one transformers writes (`per_layer_config`).
// Every inconsistency is a ConfigError naming the file and the field.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mb::gemma4 {

inline constexpr const char* kSliding = "sliding_attention";
inline constexpr const char* kFull = "full_attention";

// One entry of rope_parameters.
struct RopeParameters {
  std::string rope_type = "default";  // text: "default" | "proportional"; vision: "default" (read as axial)
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;
  bool operator==(const RopeParameters&) const = default;
};

// What decoder layer `index` is, derived from the text config (spec §1.2).
struct LayerSpec {
  int64_t index = 0;
  std::string layer_type;            // kSliding | kFull
  int64_t head_dim = 0;              // global_head_dim on full layers
  int64_t num_key_value_heads = 0;   // num_global_key_value_heads on full layers of k=v models
  std::string kv_mode;               // "" (own cache) | "store" (own cache, shared) | "reuse" (reads kv_source's)
  int64_t kv_source = 0;             // the layer whose K/V this layer attends to (itself unless "reuse")
  int64_t intermediate_size = 0;     // dense MLP width (doubled in E2B's reuse layers)
  bool has_v_proj = true;            // false on full layers of attention_k_eq_v models: V = v_norm(raw k)
  RopeParameters rope;

  bool is_sliding() const { return layer_type == kSliding; }
  bool reuses_kv() const { return kv_mode == "reuse"; }
  bool operator==(const LayerSpec&) const = default;
};

struct TextConfig {
  std::string model_type;  // "gemma4_text" | "gemma4_unified_text"
  int64_t vocab_size = 262144;
  int64_t hidden_size = 2304;
  int64_t intermediate_size = 9216;
  int64_t num_hidden_layers = 30;
  int64_t num_attention_heads = 8;
  int64_t num_key_value_heads = 4;
  int64_t head_dim = 256;
  std::string hidden_activation = "gelu_pytorch_tanh";
  int64_t max_position_embeddings = 131072;
  double rms_norm_eps = 1e-6;
  int64_t sliding_window = 512;  // keys incl. self; already halved when use_bidirectional_attention == "all"
  std::optional<double> final_logit_softcapping;
  std::optional<std::string> use_bidirectional_attention;  // null | "vision" | "all"
  int64_t vocab_size_per_layer_input = 262144;
  int64_t hidden_size_per_layer_input = 256;  // PLE width (0 = no PLE; always 0 for unified)
  bool attention_k_eq_v = false;
  int64_t global_head_dim = 512;
  std::optional<int64_t> num_global_key_value_heads;
  int64_t num_kv_shared_layers = 0;
  bool enable_moe_block = false;
  bool use_double_wide_mlp = false;
  int64_t num_experts = 0, top_k_experts = 0, moe_intermediate_size = 0;  // 0 without MoE
  bool tie_word_embeddings = true;
  int64_t pad_token_id = 0, bos_token_id = 2;
  std::vector<int64_t> eos_token_id;
  std::vector<std::string> layer_types;  // the last one forced to full, as transformers does
  std::map<std::string, RopeParameters> rope_parameters;  // by layer type

  std::vector<LayerSpec> layers;  // derived, one per layer

  bool has_ple() const { return hidden_size_per_layer_input > 0; }
  int64_t first_kv_shared_layer() const { return num_hidden_layers - num_kv_shared_layers; }
};

// vision_config of gemma4 (the ViT of E2B/E4B/26B/31B).
struct VisionConfig {
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int64_t num_hidden_layers = 16;
  int64_t num_attention_heads = 12;
  int64_t num_key_value_heads = 12;
  int64_t head_dim = 64;
  std::string hidden_activation = "gelu_pytorch_tanh";
  double rms_norm_eps = 1e-6;
  int64_t pooling_kernel_size = 3;
  int64_t patch_size = 16;
  int64_t position_embedding_size = 10240;
  bool use_clipped_linears = false;
  bool standardize = false;
  RopeParameters rope_parameters{"default", 100.0, 1.0};  // 2-D axial rope
};

// audio_config of gemma4 (the conformer of E2B/E4B).
struct AudioConfig {
  int64_t hidden_size = 1024;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 8;
  std::string hidden_act = "silu";
  std::vector<int64_t> subsampling_conv_channels{128, 32};
  int64_t conv_kernel_size = 5;
  double residual_weight = 0.5;
  int64_t attention_chunk_size = 12;
  int64_t attention_context_left = 13;
  int64_t attention_context_right = 0;
  double attention_logit_cap = 50.0;
  double attention_invalid_logits_value = -1e9;
  bool use_clipped_linears = true;
  double rms_norm_eps = 1e-6;
  double gradient_clipping = 1e10;
  int64_t output_proj_dims = 1536;
};

// vision_config of gemma4_unified (the 12B's patch embedder, no ViT).
struct UnifiedVisionConfig {
  int64_t patch_size = 16;
  int64_t pooling_kernel_size = 3;
  int64_t mm_embed_dim = 3840;
  int64_t mm_posemb_size = 1120;
  double rms_norm_eps = 1e-6;
  int64_t output_proj_dims = 3840;
  int64_t model_patch_size() const { return patch_size * pooling_kernel_size; }
};

// audio_config of gemma4_unified (raw waveform frames).
struct UnifiedAudioConfig {
  int64_t audio_embed_dim = 640;  // = samples per audio token
  double rms_norm_eps = 1e-6;
};

struct Gemma4Config {
  std::string model_type;  // "gemma4" | "gemma4_unified" | "gemma4_text" | "gemma4_unified_text"
  TextConfig text_config;
  std::optional<VisionConfig> vision_config;                  // gemma4 only
  std::optional<AudioConfig> audio_config;                    // gemma4 only
  std::optional<UnifiedVisionConfig> unified_vision_config;   // gemma4_unified's vision_config
  std::optional<UnifiedAudioConfig> unified_audio_config;     // gemma4_unified's audio_config
  int64_t boi_token_id = 255999, eoi_token_id = 258882, image_token_id = 258880, video_token_id = 258884;
  int64_t boa_token_id = 256000, eoa_token_index = 258883, audio_token_id = 258881;
  std::vector<int64_t> eos_token_id;  // top level (falls back to text_config's)

  bool is_unified() const { return model_type == "gemma4_unified" || model_type == "gemma4_unified_text"; }
  // Placeholder ids that stand for soft tokens (image, video, audio): embedded as pad (spec §2.0).
  std::vector<int64_t> placeholder_token_ids() const { return {image_token_id, video_token_id, audio_token_id}; }
  // "gemma-4-E2B", ... a human-readable family guess.
  std::string family() const;
};

// Parses config.json text; `where` names the file in messages.
Gemma4Config parse_config(std::string_view json_text, const std::string& where = "config.json");
// Reads DIR/config.json (or the file itself).
Gemma4Config load_config(const std::string& path);

}  // namespace mb::gemma4
