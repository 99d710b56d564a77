#include "models/gemma4/config.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <set>

#include "core/errors.h"
#include "core/mutation.h"
#include "io/json.h"
#include "io/regular_file.h"

namespace mb::gemma4 {

namespace json = io::json;

namespace {

constexpr uint64_t kMaxConfigBytes = uint64_t(64) << 20;

// A JSON value for an error message ("'big'", "true", "null", "3", "an array").
std::string show(const json::Value* v) {
  if (!v || v->is(json::Kind::Null)) return "null";
  switch (v->kind) {
    case json::Kind::Bool: return v->boolean ? "true" : "false";
    case json::Kind::String: return json::quote_text(v->str, 60);
    case json::Kind::Number:
      if (v->integral) return cat(v->negative ? "-" : "", v->magnitude);
      return cat(v->number);
    default: return json::kind_name(v->kind);
  }
}

// Typed reads of one JSON object's fields, with transformers' class defaults for absent keys. An explicit
// null is not the default: it fails unless the field allows null (as transformers' strict configs).
class Fields {
 public:
  Fields(const json::Value& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& msg) const {
    throw ConfigError(cat(where_, ": field '", field, "' ", msg));
  }
  const json::Value* get(const char* key) const { return obj_.find(key); }
  bool has(const char* key) const { return get(key) != nullptr; }
  const std::string& where() const { return where_; }

  // Every size in a config is at most kMaxSize: a config claiming a 10⁹-wide layer is refused here, from
  // the config alone, before anything is sized from it (released Gemma 4 sizes are below 2^19).
  static constexpr int64_t kMaxSize = int64_t(1) << 24;
  // Layer counts are at most kMaxLayers (the largest Gemma 4 has 60).
  static constexpr int64_t kMaxLayers = 4096;

  int64_t integer(const char* key, int64_t fallback, int64_t minimum = 0, int64_t maximum = kMaxSize) const {
    const json::Value* v = get(key);
    if (!v) return fallback;
    return integer_value(v, key, minimum, maximum);
  }
  std::optional<int64_t> optional_integer(const char* key, std::optional<int64_t> fallback, int64_t minimum = 0) const {
    const json::Value* v = get(key);
    if (!v) return fallback;
    if (v->is(json::Kind::Null)) return std::nullopt;
    return integer_value(v, key, minimum);
  }
  int64_t integer_value(const json::Value* v, const std::string& key, int64_t minimum, int64_t maximum = kMaxSize) const {
    if (!v->is(json::Kind::Number) || !v->integral || (v->negative && v->magnitude != 0) ||
        v->magnitude > uint64_t(INT64_MAX))
      fail(key, cat("must be an integer, got ", show(v)));
    const int64_t x = v->negative ? -int64_t(v->magnitude) : int64_t(v->magnitude);
    if (x < minimum) fail(key, cat("must be >= ", minimum, ", got ", x));
    if (x > maximum) fail(key, cat(x, " is beyond what markbase accepts (at most ", maximum, ")"));
    return x;
  }
  double number(const char* key, double fallback) const {
    const json::Value* v = get(key);
    if (!v) return fallback;
    return number_value(v, key);
  }
  std::optional<double> optional_number(const char* key, std::optional<double> fallback) const {
    const json::Value* v = get(key);
    if (!v) return fallback;
    if (v->is(json::Kind::Null)) return std::nullopt;
    return number_value(v, key);
  }
  double number_value(const json::Value* v, const std::string& key) const {
    if (!v->is(json::Kind::Number) || !std::isfinite(v->number)) fail(key, cat("must be a finite number, got ", show(v)));
    return v->number;
  }
  bool boolean(const char* key, bool fallback) const {
    const json::Value* v = get(key);
    if (!v) return fallback;
    if (!v->is(json::Kind::Bool)) fail(key, cat("must be true or false, got ", show(v)));
    return v->boolean;
  }
  std::string string(const char* key, const std::string& fallback) const {
    const json::Value* v = get(key);
    if (!v) return fallback;
    if (!v->is(json::Kind::String)) fail(key, cat("must be a string, got ", show(v)));
    return v->str;
  }
  // An integer or a list of integers (eos_token_id); null or absent = empty.
  std::vector<int64_t> ids(const char* key) const {
    const json::Value* v = get(key);
    std::vector<int64_t> out;
    if (!v || v->is(json::Kind::Null)) return out;
    if (v->is(json::Kind::Number)) {
      out.push_back(integer_value(v, key, 0));
      return out;
    }
    if (!v->is(json::Kind::Array)) fail(key, cat("must be an integer or a list of integers, got ", show(v)));
    for (const auto& item : v->items()) {
      if (!item.is(json::Kind::Number) || !item.integral || item.negative || item.magnitude > uint64_t(kMaxSize))
        fail(key, cat("must be an integer in [0, ", kMaxSize, "] or a list of them, got a list holding ", show(&item)));
      out.push_back(int64_t(item.magnitude));
    }
    return out;
  }

 private:
  const json::Value& obj_;
  std::string where_;
};

RopeParameters parse_rope(const json::Value& params, const std::string& layer_type, const Fields& text) {
  const json::Value* p = params.find(layer_type);
  if (!p || !p->is(json::Kind::Object)) text.fail("rope_parameters", cat("has no entry for '", layer_type, "'"));
  Fields f(*p, cat(text.where(), " rope_parameters.", layer_type));
  RopeParameters r;
  r.rope_type = f.string("rope_type", "default");
  if (r.rope_type != "default" && r.rope_type != "proportional")
    text.fail(cat("rope_parameters.", layer_type, ".rope_type"), cat("'", r.rope_type, "' is not supported (default, proportional)"));
  if (!f.has("rope_theta")) f.fail("rope_theta", "must be a finite number, got null");
  r.rope_theta = f.number("rope_theta", 0.0);
  if (r.rope_theta <= 0) text.fail(cat("rope_parameters.", layer_type, ".rope_theta"), cat("must be > 0, got ", r.rope_theta));
  const json::Value* factor = p->find("partial_rotary_factor");
  if (factor) {
    if (!factor->is(json::Kind::Number) || !(factor->number > 0 && factor->number <= 1))
      text.fail(cat("rope_parameters.", layer_type, ".partial_rotary_factor"), cat("must be in (0, 1], got ", show(factor)));
    r.partial_rotary_factor = factor->number;
  }
  return r;
}

// Full layers: head_dim and (k=v models) num_key_value_heads overridden per layer (spec §1.2).
struct LayerOverride {
  std::optional<int64_t> head_dim, num_key_value_heads;
};

std::map<int64_t, LayerOverride> parse_overrides(const json::Value& tc, const TextConfig& t, const Fields& f) {
  std::map<int64_t, LayerOverride> out;
  const json::Value* plc = tc.find("per_layer_config");
  if (plc && !plc->is(json::Kind::Null)) {  // transformers' own form, keyed by layer index
    if (!plc->is(json::Kind::Object)) f.fail("per_layer_config", "must be an object keyed by layer index");
    for (size_t i = 0; i < plc->size(); ++i) {
      const std::string& key = plc->keys()[i];
      const json::Value& val = plc->items()[i];
      int64_t idx = -1;
      if (key.empty() || key.size() > 9 || key.find_first_not_of("0123456789") != std::string::npos)
        f.fail("per_layer_config", cat("has a key ", json::quote_text(key, 40), " that is not a layer index"));
      idx = std::stoll(key);
      if (idx >= t.num_hidden_layers || !val.is(json::Kind::Object))
        f.fail(cat("per_layer_config.", key), cat("must be an object for a layer in [0, ", t.num_hidden_layers, ")"));
      for (const auto& k : val.keys())
        if (k != "head_dim" && k != "num_key_value_heads")
          f.fail(cat("per_layer_config.", key), cat("has an unsupported override '", k, "'"));
      Fields o(val, f.where());
      LayerOverride ov;
      if (o.has("head_dim")) ov.head_dim = o.integer_value(o.get("head_dim"), cat("per_layer_config.", key, ".head_dim"), 1);
      if (o.has("num_key_value_heads"))
        ov.num_key_value_heads = o.integer_value(o.get("num_key_value_heads"), cat("per_layer_config.", key, ".num_key_value_heads"), 1);
      out[idx] = ov;
    }
    return out;
  }
  LayerOverride ov;  // the published form
  ov.head_dim = t.global_head_dim;
  if (t.attention_k_eq_v && t.num_global_key_value_heads) ov.num_key_value_heads = t.num_global_key_value_heads;
  for (int64_t i = 0; i < t.num_hidden_layers; ++i)
    if (t.layer_types[size_t(i)] == kFull) out[i] = ov;
  return out;
}

TextConfig parse_text(const json::Value& tc, bool unified, const std::string& where) {
  if (!tc.is(json::Kind::Object)) throw ConfigError(cat(where, ": text_config must be an object"));
  Fields f(tc, where + " text_config");
  TextConfig t;
  t.model_type = unified ? "gemma4_unified_text" : "gemma4_text";
  if (unified) {  // Gemma4UnifiedTextConfig's defaults where they differ
    t.max_position_embeddings = 262144;
    t.sliding_window = 1024;
    t.use_bidirectional_attention = "vision";
    t.hidden_size_per_layer_input = 0;
  }
  t.num_hidden_layers = f.integer("num_hidden_layers", t.num_hidden_layers, 1, Fields::kMaxLayers);
  t.hidden_size = f.integer("hidden_size", t.hidden_size, 1);
  t.num_attention_heads = f.integer("num_attention_heads", t.num_attention_heads, 1);
  t.num_key_value_heads = f.integer("num_key_value_heads", t.num_key_value_heads, 1);
  t.head_dim = f.integer("head_dim", t.head_dim, 1);
  t.intermediate_size = f.integer("intermediate_size", t.intermediate_size, 1);
  t.vocab_size = f.integer("vocab_size", t.vocab_size, 1);
  t.sliding_window = f.integer("sliding_window", t.sliding_window, 1);
  t.hidden_activation = f.string("hidden_activation", t.hidden_activation);
  if (t.hidden_activation != "gelu_pytorch_tanh" && t.hidden_activation != "gelu_tanh")
    f.fail("hidden_activation", cat("'", t.hidden_activation, "' is not supported (gelu_pytorch_tanh)"));
  if (f.boolean("attention_bias", false)) f.fail("attention_bias", "true is not supported (Gemma 4 attention has no bias)");
  if (t.num_attention_heads % t.num_key_value_heads)
    f.fail("num_key_value_heads", cat(t.num_key_value_heads, " does not divide num_attention_heads ", t.num_attention_heads));

  if (const json::Value* b = f.get("use_bidirectional_attention")) {
    if (b->is(json::Kind::Null)) t.use_bidirectional_attention.reset();
    else if (b->is(json::Kind::String) && (b->str == "vision" || b->str == "all")) t.use_bidirectional_attention = b->str;
    else f.fail("use_bidirectional_attention", cat("must be null, 'vision' or 'all', got ", show(b)));
  }
  if (t.use_bidirectional_attention == "all") t.sliding_window = t.sliding_window / 2 + 1;  // as transformers

  const json::Value* lt = f.get("layer_types");
  if (!lt || lt->is(json::Kind::Null)) {
    for (int64_t i = 0; i < t.num_hidden_layers; ++i) t.layer_types.push_back((i + 1) % 6 ? kSliding : kFull);
  } else {
    if (!lt->is(json::Kind::Array) || int64_t(lt->size()) != t.num_hidden_layers)
      f.fail("layer_types", cat("must list ", t.num_hidden_layers, " layer types (num_hidden_layers)"));
    for (size_t i = 0; i < lt->size(); ++i) {
      const json::Value& x = lt->items()[i];
      if (!x.is(json::Kind::String) || (x.str != kSliding && x.str != kFull))
        f.fail(cat("layer_types[", i, "]"), cat(show(&x), " is not sliding_attention or full_attention"));
      t.layer_types.push_back(x.str);
    }
  }
  t.layer_types.back() = kFull;  // transformers forces the last layer to full attention

  const json::Value* rp = f.get("rope_parameters");
  if (rp && !rp->is(json::Kind::Null) && !rp->is(json::Kind::Object))
    f.fail("rope_parameters", "must be an object keyed by layer type");
  std::set<std::string> types(t.layer_types.begin(), t.layer_types.end());
  for (const std::string& type : types) {
    if (!rp || rp->is(json::Kind::Null)) {
      t.rope_parameters[type] = type == kSliding ? RopeParameters{"default", 10000.0, 1.0}
                                                 : RopeParameters{"proportional", 1000000.0, 0.25};
    } else {
      t.rope_parameters[type] = parse_rope(*rp, type, f);
    }
  }

  t.attention_k_eq_v = f.boolean("attention_k_eq_v", false);
  t.global_head_dim = f.integer("global_head_dim", t.global_head_dim, 1);
  t.num_global_key_value_heads = f.optional_integer("num_global_key_value_heads", std::nullopt, 1);
  const std::map<int64_t, LayerOverride> overrides = parse_overrides(tc, t, f);

  t.num_kv_shared_layers = f.integer("num_kv_shared_layers", 0, 0);
  if (t.num_kv_shared_layers >= t.num_hidden_layers)
    f.fail("num_kv_shared_layers", cat(t.num_kv_shared_layers, " must be smaller than num_hidden_layers ", t.num_hidden_layers));
  const int64_t first_shared = t.first_kv_shared_layer();
  std::map<std::string, int64_t> store_of;  // layer type -> the last non-shared layer of that type
  if (t.num_kv_shared_layers)
    for (const std::string& type : types) {
      int64_t producer = -1;
      for (int64_t i = 0; i < first_shared; ++i)
        if (t.layer_types[size_t(i)] == type) producer = i;
      if (producer < 0) f.fail("num_kv_shared_layers", cat("leaves no non-shared '", type, "' layer to produce the shared cache"));
      store_of[type] = producer;
    }
  t.use_double_wide_mlp = f.boolean("use_double_wide_mlp", false);

  t.enable_moe_block = !unified && f.boolean("enable_moe_block", false);
  if (t.enable_moe_block) {
    auto need = [&](const char* key) {
      const json::Value* v = f.get(key);
      if (!v) f.fail(key, "must be an integer, got null");
      return f.integer_value(v, key, 1);
    };
    t.num_experts = need("num_experts");
    t.top_k_experts = need("top_k_experts");
    t.moe_intermediate_size = need("moe_intermediate_size");
    if (t.top_k_experts > t.num_experts)
      f.fail("top_k_experts", cat(t.top_k_experts, " exceeds num_experts ", t.num_experts));
  }
  t.hidden_size_per_layer_input =
      unified ? 0 : f.optional_integer("hidden_size_per_layer_input", t.hidden_size_per_layer_input, 0).value_or(0);
  t.vocab_size_per_layer_input = t.has_ple() ? f.integer("vocab_size_per_layer_input", t.vocab_size_per_layer_input, 1) : 0;

  for (int64_t i = 0; i < t.num_hidden_layers; ++i) {
    LayerSpec L;
    L.index = i;
    L.layer_type = t.layer_types[size_t(i)];
    auto ov = overrides.find(i);
    L.head_dim = ov != overrides.end() && ov->second.head_dim ? *ov->second.head_dim : t.head_dim;
    L.num_key_value_heads =
        ov != overrides.end() && ov->second.num_key_value_heads ? *ov->second.num_key_value_heads : t.num_key_value_heads;
    if (t.num_attention_heads % L.num_key_value_heads)
      f.fail(cat("per_layer_config.", i, ".num_key_value_heads"),
             cat(L.num_key_value_heads, " does not divide num_attention_heads ", t.num_attention_heads));
    if (i >= first_shared) L.kv_mode = "reuse";
    else if (t.num_kv_shared_layers && store_of[L.layer_type] == i) L.kv_mode = "store";
    L.kv_source = L.reuses_kv() ? store_of[L.layer_type] : i;
    if (mutation("kv_share_wrong_layer") && L.reuses_kv())  // an earlier layer of the same type
      for (int64_t j = L.kv_source - 1; j >= 0; --j)
        if (t.layers[size_t(j)].layer_type == L.layer_type) { L.kv_source = j; break; }
    L.intermediate_size = t.intermediate_size * (t.use_double_wide_mlp && L.reuses_kv() ? 2 : 1);
    L.has_v_proj = !(t.attention_k_eq_v && L.layer_type == kFull);
    L.rope = t.rope_parameters[L.layer_type];
    t.layers.push_back(L);
  }
  // A reuse layer attends to its producer's cache, so their shapes must agree.
  for (const LayerSpec& L : t.layers)
    if (L.reuses_kv()) {
      const LayerSpec& src = t.layers[size_t(L.kv_source)];
      if (src.head_dim != L.head_dim || src.num_key_value_heads != L.num_key_value_heads)
        f.fail("per_layer_config", cat("layer ", L.index, " reuses layer ", src.index,
                                       "'s cache but their head_dim/num_key_value_heads differ"));
    }

  t.final_logit_softcapping = f.optional_number("final_logit_softcapping", std::nullopt);
  if (t.final_logit_softcapping && *t.final_logit_softcapping <= 0)
    f.fail("final_logit_softcapping", cat("must be > 0 or null, got ", *t.final_logit_softcapping));
  t.max_position_embeddings = f.integer("max_position_embeddings", t.max_position_embeddings, 1);
  t.rms_norm_eps = f.number("rms_norm_eps", t.rms_norm_eps) * (mutation("text_rms_eps_x10") ? 10.0 : 1.0);
  if (t.rms_norm_eps < 0) f.fail("rms_norm_eps", cat("must be >= 0, got ", t.rms_norm_eps));
  t.tie_word_embeddings = f.boolean("tie_word_embeddings", true);
  t.pad_token_id = f.optional_integer("pad_token_id", 0, 0).value_or(0);
  t.bos_token_id = f.optional_integer("bos_token_id", 2, 0).value_or(2);
  t.eos_token_id = f.has("eos_token_id") ? f.ids("eos_token_id") : std::vector<int64_t>{1};
  return t;
}

VisionConfig parse_vision(const json::Value& vc, const std::string& where) {
  Fields f(vc, where + " vision_config");
  VisionConfig v;
  v.hidden_size = f.integer("hidden_size", v.hidden_size, 1);
  v.intermediate_size = f.integer("intermediate_size", v.intermediate_size, 1);
  v.num_hidden_layers = f.integer("num_hidden_layers", v.num_hidden_layers, 1, Fields::kMaxLayers);
  v.num_attention_heads = f.integer("num_attention_heads", v.num_attention_heads, 1);
  v.num_key_value_heads = f.integer("num_key_value_heads", v.num_attention_heads, 1);
  v.head_dim = f.integer("head_dim", v.head_dim, 1);
  if (v.head_dim % 4) f.fail("head_dim", cat(v.head_dim, " must be a multiple of 4 (2-D rope rotates two halves of each half)"));
  if (v.num_attention_heads % v.num_key_value_heads)
    f.fail("num_key_value_heads", cat(v.num_key_value_heads, " does not divide num_attention_heads ", v.num_attention_heads));
  v.hidden_activation = f.string("hidden_activation", v.hidden_activation);
  if (v.hidden_activation != "gelu_pytorch_tanh" && v.hidden_activation != "gelu_tanh")
    f.fail("hidden_activation", cat("'", v.hidden_activation, "' is not supported (gelu_pytorch_tanh)"));
  if (f.boolean("attention_bias", false)) f.fail("attention_bias", "true is not supported (Gemma 4 vision attention has no bias)");
  v.rms_norm_eps = f.number("rms_norm_eps", v.rms_norm_eps);
  v.pooling_kernel_size = f.integer("pooling_kernel_size", v.pooling_kernel_size, 1);
  v.patch_size = f.integer("patch_size", v.patch_size, 1);
  v.position_embedding_size = f.integer("position_embedding_size", v.position_embedding_size, 1);
  v.use_clipped_linears = f.boolean("use_clipped_linears", v.use_clipped_linears);
  v.standardize = f.boolean("standardize", v.standardize);
  if (const json::Value* rp = f.get("rope_parameters"); rp && !rp->is(json::Kind::Null)) {
    if (!rp->is(json::Kind::Object)) f.fail("rope_parameters", "must be an object");
    Fields r(*rp, f.where() + " rope_parameters");
    v.rope_parameters.rope_theta = r.number("rope_theta", v.rope_parameters.rope_theta);
    if (v.rope_parameters.rope_theta <= 0) f.fail("rope_parameters.rope_theta", "must be > 0");
  }
  return v;
}

AudioConfig parse_audio(const json::Value& ac, const std::string& where) {
  Fields f(ac, where + " audio_config");
  AudioConfig a;
  a.hidden_size = f.integer("hidden_size", a.hidden_size, 1);
  a.num_hidden_layers = f.integer("num_hidden_layers", a.num_hidden_layers, 1, Fields::kMaxLayers);
  a.num_attention_heads = f.integer("num_attention_heads", a.num_attention_heads, 1);
  if (a.hidden_size % a.num_attention_heads)
    f.fail("num_attention_heads", cat(a.num_attention_heads, " does not divide hidden_size ", a.hidden_size));
  a.hidden_act = f.string("hidden_act", a.hidden_act);
  if (a.hidden_act != "silu") f.fail("hidden_act", cat("'", a.hidden_act, "' is not supported (silu)"));
  if (const json::Value* ch = f.get("subsampling_conv_channels")) {
    if (!ch->is(json::Kind::Array) || ch->size() != 2) f.fail("subsampling_conv_channels", "must list two channel counts");
    a.subsampling_conv_channels.clear();
    for (const auto& c : ch->items()) a.subsampling_conv_channels.push_back(f.integer_value(&c, "subsampling_conv_channels", 1));
  }
  a.conv_kernel_size = f.integer("conv_kernel_size", a.conv_kernel_size, 1);
  a.residual_weight = f.number("residual_weight", a.residual_weight);
  a.attention_chunk_size = f.integer("attention_chunk_size", a.attention_chunk_size, 1);
  a.attention_context_left = f.integer("attention_context_left", a.attention_context_left, 1);
  a.attention_context_right = f.integer("attention_context_right", a.attention_context_right, 0);
  a.attention_logit_cap = f.number("attention_logit_cap", a.attention_logit_cap);
  a.attention_invalid_logits_value = f.number("attention_invalid_logits_value", a.attention_invalid_logits_value);
  a.use_clipped_linears = f.boolean("use_clipped_linears", a.use_clipped_linears);
  a.rms_norm_eps = f.number("rms_norm_eps", a.rms_norm_eps);
  a.gradient_clipping = f.number("gradient_clipping", a.gradient_clipping);
  a.output_proj_dims = f.integer("output_proj_dims", a.output_proj_dims, 1);
  return a;
}

UnifiedVisionConfig parse_unified_vision(const json::Value& vc, const std::string& where) {
  Fields f(vc, where + " vision_config");
  UnifiedVisionConfig v;
  v.patch_size = f.integer("patch_size", v.patch_size, 1);
  v.pooling_kernel_size = f.integer("pooling_kernel_size", v.pooling_kernel_size, 1);
  v.mm_embed_dim = f.integer("mm_embed_dim", v.mm_embed_dim, 1);
  v.mm_posemb_size = f.integer("mm_posemb_size", v.mm_posemb_size, 1);
  v.rms_norm_eps = f.number("rms_norm_eps", v.rms_norm_eps);
  v.output_proj_dims = f.integer("output_proj_dims", v.output_proj_dims, 1);
  if (f.has("model_patch_size") && f.integer("model_patch_size", 0, 1) != v.model_patch_size())
    f.fail("model_patch_size", cat("must equal patch_size * pooling_kernel_size = ", v.model_patch_size()));
  return v;
}

UnifiedAudioConfig parse_unified_audio(const json::Value& ac, const std::string& where) {
  Fields f(ac, where + " audio_config");
  UnifiedAudioConfig a;
  a.audio_embed_dim = f.integer("audio_embed_dim", a.audio_embed_dim, 1);
  a.rms_norm_eps = f.number("rms_norm_eps", a.rms_norm_eps);
  return a;
}

// An object sub-config, or nullptr when absent / null.
const json::Value* sub_config(const json::Value& root, const char* key, const std::string& where) {
  const json::Value* v = root.find(key);
  if (!v || v->is(json::Kind::Null)) return nullptr;
  if (!v->is(json::Kind::Object)) throw ConfigError(cat(where, ": field '", key, "' must be an object or null"));
  return v;
}

}  // namespace

std::string Gemma4Config::family() const {
  const TextConfig& t = text_config;
  if (is_unified()) return "gemma-4-12B (unified)";
  if (t.enable_moe_block) return "gemma-4-26B-A4B (MoE)";
  if (t.has_ple()) return t.use_double_wide_mlp ? "gemma-4-E2B" : "gemma-4-E4B";
  return "gemma-4-31B (dense)";
}

Gemma4Config parse_config(std::string_view json_text, const std::string& where) {
  json::Value root;
  try {
    root = json::parse(json_text);
  } catch (const json::ParseError& e) {
    throw ConfigError(cat(where, ": not valid JSON (", e.what(), " at byte ", e.offset, ")"));
  }
  if (!root.is(json::Kind::Object)) throw ConfigError(cat(where, ": the top level must be a JSON object"));
  Fields top(root, where);
  Gemma4Config c;
  c.model_type = top.has("model_type") && top.get("model_type")->is(json::Kind::String) ? top.get("model_type")->str : "";
  const bool unified = c.model_type == "gemma4_unified" || c.model_type == "gemma4_unified_text";
  if (c.model_type == "gemma4" || c.model_type == "gemma4_unified") {
    const json::Value* tc = root.find("text_config");
    if (!tc) throw ConfigError(cat(where, ": text_config must be an object"));
    c.text_config = parse_text(*tc, unified, where);
    if (const json::Value* v = sub_config(root, "vision_config", where)) {
      if (unified) c.unified_vision_config = parse_unified_vision(*v, where);
      else c.vision_config = parse_vision(*v, where);
    }
    if (const json::Value* a = sub_config(root, "audio_config", where)) {
      if (unified) c.unified_audio_config = parse_unified_audio(*a, where);
      else c.audio_config = parse_audio(*a, where);
    }
  } else if (c.model_type == "gemma4_text" || c.model_type == "gemma4_unified_text") {
    c.text_config = parse_text(root, unified, where);
  } else {
    top.fail("model_type", cat(show(top.get("model_type")), " is not a Gemma 4 model (gemma4, gemma4_unified, gemma4_text)"));
  }
  if (top.has("tie_word_embeddings") && !top.boolean("tie_word_embeddings", true))
    top.fail("tie_word_embeddings", "false is not supported (Gemma 4 ties the LM head to the embeddings)");
  c.boi_token_id = top.integer("boi_token_id", c.boi_token_id);
  c.eoi_token_id = top.integer("eoi_token_id", c.eoi_token_id);
  c.image_token_id = top.integer("image_token_id", c.image_token_id);
  c.video_token_id = top.integer("video_token_id", c.video_token_id);
  c.boa_token_id = top.integer("boa_token_id", c.boa_token_id);
  c.eoa_token_index = top.integer("eoa_token_index", c.eoa_token_index);
  c.audio_token_id = top.integer("audio_token_id", c.audio_token_id);
  c.eos_token_id = top.ids("eos_token_id");
  if (c.eos_token_id.empty()) c.eos_token_id = c.text_config.eos_token_id;
  return c;
}

Gemma4Config load_config(const std::string& path) {
  std::string file = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) file = path + "/config.json";
  std::string text, error;
  if (!io::read_regular_file(file, kMaxConfigBytes, &text, &error)) {
    if (errno == ENOENT) throw ConfigError(cat(file, ": no config.json"));
    throw CheckpointError(cat(file, ": ", error));  // a FIFO, a device, too large, unreadable
  }
  return parse_config(text, file);
}

}  // namespace mb::gemma4
