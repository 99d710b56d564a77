#include "models/gemma4/model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <tuple>

#include "core/errors.h"
#include "core/mutation.h"
#include "runtime/nonfinite.h"

namespace mb::gemma4 {

namespace {

// Collects the walk into a list.
class TableCollector : public WeightVisitor {
 public:
  std::vector<WeightSpec> specs;
  void weight(const WeightSpec& spec, Hold, WeightSlot) override { specs.push_back(spec); }
};

// The memory of every bound tensor with its name.
class SpanCollector : public WeightVisitor {
 public:
  std::vector<std::tuple<const char*, const char*, std::string>> spans;
  void weight(const WeightSpec& spec, Hold, WeightSlot slot) override {
    if (slot.tensor) add(*slot.tensor, spec.name);
    for (const ops::LinearWeight* w : {slot.linear, slot.second_half}) {
      if (!w) continue;
      const std::string name = w == slot.second_half ? spec.name + " (second half)" : spec.name;
      add(w->dense, name);
      add(w->quant.q, name);
      add(w->quant.scales, name + " (scales)");
      add(w->quant.biases, name + " (biases)");
    }
  }

 private:
  void add(const Tensor& t, const std::string& name) {
    if (!t.defined() || t.numel() == 0) return;
    const char* b = static_cast<const char*>(t.data());
    spans.emplace_back(b, b + t.nbytes(), name);
  }
};

// Sums the bytes of the text matrices a decode step reads: stacked experts count top_k / num_experts
// of theirs (the experts one token is routed to).
class DecodeBytesCounter : public WeightVisitor {
 public:
  explicit DecodeBytesCounter(double expert_fraction) : expert_fraction_(expert_fraction) {}
  double bytes = 0;
  void weight(const WeightSpec& spec, Hold, WeightSlot slot) override {
    if (spec.component != "text" || spec.quant == QuantRule::Gathered) return;  // the PLE table: a row per token
    const double f = spec.name.find(".experts.") != std::string::npos ? expert_fraction_ : 1.0;
    if (slot.linear) bytes += f * double(slot.linear->nbytes());
    if (slot.second_half) bytes += f * double(slot.second_half->nbytes());
  }

 private:
  double expert_fraction_;
};

// `value` as the table's storage dtype holds it: transformers casts sqrt(H) to the weight dtype (spec §2.2).
float round_to_dtype(double value, DType dtype) {
  const float f = float(value);
  if (dtype == DType::BF16) return bf16_to_f32(f32_to_bf16(f));
  if (dtype == DType::F16) return f16_to_f32(f32_to_f16(f));
  return f;
}

}  // namespace

void visit_weights(const Gemma4Config& cfg, ModelWeights& w, WeightVisitor& visitor) {
  const int64_t H = cfg.text_config.hidden_size;
  // Text-only checkpoints keep the decoder under "model."; multimodal ones under "model.language_model."
  // (also accepted with the legacy doubled prefix "model.language_model.model.").
  const bool text_only = cfg.model_type == "gemma4_text" || cfg.model_type == "gemma4_unified_text";
  // MLX checkpoints (mlx-vlm's convert) drop the leading "model." of every part and keep the decoder
  // under "language_model.model.".
  const WeightScope text =
      text_only ? WeightScope(visitor, "model.", "text", {"language_model.model."})
                : WeightScope(visitor, "model.language_model.", "text", {"model.language_model.model.", "language_model.model."});
  visit_weights(cfg.text_config, w.text, text);
  // emplace only what is not there yet: a walk over bound weights (a SpanCollector) must not reset them
  if (cfg.vision_config) {
    if (!w.vision) w.vision.emplace();
    visit_weights(*cfg.vision_config, H, *w.vision, WeightScope(visitor, "model.vision_tower.", "vision", {"vision_tower."}),
                  WeightScope(visitor, "model.embed_vision.", "embed_vision", {"embed_vision."}));
  }
  if (cfg.audio_config) {
    if (!w.audio) w.audio.emplace();
    visit_weights(*cfg.audio_config, H, *w.audio, WeightScope(visitor, "model.audio_tower.", "audio", {"audio_tower."}),
                  WeightScope(visitor, "model.embed_audio.", "embed_audio", {"embed_audio."}));
  }
  if (cfg.unified_vision_config) {
    if (!w.unified_vision) w.unified_vision.emplace();
    visit_weights(*cfg.unified_vision_config, H, *w.unified_vision,
                  WeightScope(visitor, "model.embed_vision.", "embed_vision", {"embed_vision."}));
  }
  if (cfg.unified_audio_config) {
    if (!w.unified_audio) w.unified_audio.emplace();
    visit_weights(*cfg.unified_audio_config, H, *w.unified_audio,
                  WeightScope(visitor, "model.embed_audio.", "embed_audio", {"embed_audio."}));
  }
  // An untied copy of the LM head is tolerated and never read (the head is tied to embed_tokens).
  WeightScope(visitor, "", "text").ignored("lm_head.weight", {cfg.text_config.vocab_size, H});
}

std::vector<WeightSpec> weight_table(const Gemma4Config& cfg) {
  TableCollector c;
  ModelWeights scratch;
  visit_weights(cfg, scratch, c);
  return std::move(c.specs);
}

std::shared_ptr<Gemma4Model> Gemma4Model::load(const std::string& dir, const LoadOptions& opt) {
  std::shared_ptr<Gemma4Model> m(new Gemma4Model());
  m->dir_ = dir;
  m->cfg_ = load_config(dir);
  m->exec_ = opt.exec;
  const TextConfig& t = m->cfg_.text_config;
  m->max_context_ = opt.max_context ? opt.max_context : t.max_position_embeddings;
  if (m->max_context_ < 1 || m->max_context_ > t.max_position_embeddings)
    throw InputError(cat("load: max_context must be an integer in [1, ", t.max_position_embeddings,
                         "] (max_position_embeddings), got ", opt.max_context));
  if (opt.prefill_chunk < 1) throw InputError(cat("load: prefill_chunk must be a positive integer, got ", opt.prefill_chunk));
  m->ckpt_ = io::Checkpoint::open(dir);
  if (opt.quantize.bits != 0 && opt.quantize.bits != 4 && opt.quantize.bits != 8)
    throw InputError(cat("load: quantize must be 4 or 8 bits (q4 / q8), got ", opt.quantize.bits));
  CheckpointBinder binder(m->ckpt_, opt.quantize);
  visit_weights(m->cfg_, m->weights_, binder);

  TextSettings s;
  s.max_chunk = opt.prefill_chunk;
  const TextWeights& tw = m->weights_.text;
  s.embed_scale = round_to_dtype(std::sqrt(double(t.hidden_size)), tw.embed_tokens.dtype());
  if (t.has_ple())
    s.ple_embed_scale = round_to_dtype(std::sqrt(double(t.hidden_size_per_layer_input - (mutation("ple_scale_sqrt_p_minus_1") ? 1 : 0))),
                                       tw.embed_tokens_per_layer.dtype());
  for (int64_t id : m->cfg_.placeholder_token_ids()) s.placeholder_ids.push_back(int32_t(id));
  m->text_ = std::make_unique<TextDecoder>(t, m->weights_.text, s, m->exec_);
  // bf16 products are the text decoder's prefill permission (tests/models/test_bf16_products_oracle.py holds
  // it to a policy); the encoders keep f32 products.
  Exec encoder_exec = m->exec_;
  encoder_exec.bf16_products = false;
  if (m->weights_.vision) m->vision_ = std::make_unique<VisionTower>(*m->cfg_.vision_config, *m->weights_.vision, encoder_exec);
  if (m->weights_.unified_vision)
    m->unified_vision_ =
        std::make_unique<UnifiedVisionEmbedder>(*m->cfg_.unified_vision_config, *m->weights_.unified_vision, encoder_exec);
  if (m->weights_.audio) m->audio_ = std::make_unique<AudioTower>(*m->cfg_.audio_config, *m->weights_.audio, encoder_exec);
  if (m->weights_.unified_audio)
    m->unified_audio_ =
        std::make_unique<UnifiedAudioEmbedder>(*m->cfg_.unified_audio_config, *m->weights_.unified_audio, encoder_exec);

  SpanCollector spans;
  visit_weights(m->cfg_, m->weights_, spans);
  for (auto& [b, e, name] : spans.spans) m->weight_spans_.push_back({b, e, std::move(name)});
  std::sort(m->weight_spans_.begin(), m->weight_spans_.end(), [](const WeightSpan& a, const WeightSpan& b) {
    return a.begin < b.begin;
  });
  const char* env = std::getenv("MARKBASE_CHECK_FINITE");
  m->check_finite_ = env && *env && std::strcmp(env, "0") != 0;
  return m;
}

size_t Gemma4Model::decode_weight_bytes() const {
  const TextConfig& t = cfg_.text_config;
  DecodeBytesCounter c(t.enable_moe_block ? double(t.top_k_experts) / double(t.num_experts) : 1.0);
  ModelWeights& w = const_cast<ModelWeights&>(weights_);  // the walk only reads the bound slots
  visit_weights(cfg_, w, c);
  return size_t(c.bytes);
}

template <class F>
auto Gemma4Model::checked(F&& encode) const {
  auto out = [&] {
    if (!check_finite_) return encode();
    runtime::NonFiniteTracer tracer(*exec_.backend, [this](const Tensor& t) { return weight_name(t); });
    auto traced = encode();
    tracer.finish();
    if (tracer.report().found) throw NumericsError(tracer.report().describe());
    return traced;
  }();
  // Soft tokens are few (n × H): always checked, so a NaN never reaches a prompt unannounced.
  const float* p = out.soft.template data_as<const float>();
  for (int64_t i = 0; i < out.soft.numel(); ++i)
    if (!std::isfinite(p[i]))
      throw NumericsError(cat("the encoder produced NaN/Inf soft tokens (row ", i / out.soft.size(1), " of ",
                              out.soft.size(0), "); the checkpoint may hold non-finite weights (run `markbase validate ",
                              dir_, "`); MARKBASE_CHECK_FINITE=1 names the first op and layer that made one"));
  return out;
}

VisionOutput Gemma4Model::encode_image(const Tensor& pixels, const Tensor& positions) const {
  check_files_unchanged();
  if (vision_) return checked([&] { return vision_->encode(pixels, positions); });
  if (unified_vision_) return checked([&] { return unified_vision_->encode(pixels, positions); });
  throw InputError(cat("this checkpoint (", cfg_.family(), ", ", dir_, ") has no vision encoder: its config.json has no "
                       "vision_config, so it cannot take images or video"));
}

AudioOutput Gemma4Model::encode_audio(const Tensor& features, int64_t valid_frames) const {
  check_files_unchanged();
  if (audio_) return checked([&] { return audio_->encode(features, valid_frames); });
  if (unified_audio_) {
    if (features.dim() == 2 && valid_frames != features.size(0))
      throw InputError(cat("audio: the 12B embedder takes every waveform frame; valid_frames = ", valid_frames,
                           " but there are ", features.size(0)));
    return checked([&] { return unified_audio_->encode(features); });
  }
  throw InputError(cat("this checkpoint (", cfg_.family(), ", ", dir_, ") has no audio encoder: its config.json has no "
                       "audio_config, so it cannot take audio (Gemma 4 hears in E2B, E4B and the 12B)"));
}

std::string Gemma4Model::weight_name(const Tensor& t) const {
  const char* p = static_cast<const char*>(t.data());
  auto it = std::upper_bound(weight_spans_.begin(), weight_spans_.end(), p,
                             [](const char* q, const WeightSpan& s) { return q < s.begin; });
  if (it == weight_spans_.begin()) return "";
  --it;
  return p < it->end ? it->name : "";
}

}  // namespace mb::gemma4
