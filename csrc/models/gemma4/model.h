// A loaded Gemma 4 checkpoint: its config, the text decoder and the encoders' weights (vision tower,
// audio tower or, on the 12B, the unified embedders), all bound from one walk of the weight table over
// the memory-mapped checkpoint.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ops/exec.h"
#include "io/checkpoint.h"
#include "models/gemma4/audio.h"
#include "models/gemma4/config.h"
#include "models/gemma4/text.h"
#include "models/gemma4/unified_embedders.h"
#include "models/gemma4/vision.h"
#include "models/gemma4/weights.h"

namespace mb::gemma4 {

// Every tensor the model reads, by part.
struct ModelWeights {
  TextWeights text;
  std::optional<VisionWeights> vision;                // gemma4 with a vision_config
  std::optional<AudioWeights> audio;                  // gemma4 with an audio_config
  std::optional<UnifiedVisionWeights> unified_vision;  // gemma4_unified
  std::optional<UnifiedAudioWeights> unified_audio;
};

// The whole model's walk: the text decoder, then the encoders its config has, then the ignorable
// untied lm_head. The parts exist in `w` afterwards (the optional ones as the config says).
void visit_weights(const Gemma4Config& cfg, ModelWeights& w, WeightVisitor& visitor);

// Every tensor a checkpoint of this config holds (plus the ignorable ones), in a stable order.
std::vector<WeightSpec> weight_table(const Gemma4Config& cfg);

struct LoadOptions {
  Exec exec;                   // the device the model runs on
  int64_t max_context = 0;     // 0: max_position_embeddings
  int64_t prefill_chunk = 512;
  QuantizeOptions quantize;    // bits 0: matrices as stored
};

class Gemma4Model {
 public:
  // Parses DIR/config.json, opens the checkpoint and binds every tensor of the weight table.
  static std::shared_ptr<Gemma4Model> load(const std::string& dir, const LoadOptions& options);

  const std::string& dir() const { return dir_; }
  const Gemma4Config& config() const { return cfg_; }
  const TextDecoder& text() const { return *text_; }
  int64_t max_context() const { return max_context_; }
  const Exec& exec() const { return exec_; }
  const ModelWeights& weights() const { return weights_; }
  // Bytes of text-decoder weights a decode step reads (every matrix but the gathered PLE table, the tied
  // embedding counted once as the LM head; of stacked experts the top_k / num_experts a token is routed
  // to), as the model holds them (quantized or not).
  size_t decode_weight_bytes() const;
  // CheckpointError when a safetensors file was truncated or modified in place since load (checked before
  // every forward of a session and every encoder call: the weights are read from the mapping).
  void check_files_unchanged() const { ckpt_.check_unchanged(); }
  // Encodes one image's patches (preprocess/image.py): the vision tower + embed_vision, or the 12B's
  // embedder. InputError when the checkpoint has no vision part.
  VisionOutput encode_image(const Tensor& pixels, const Tensor& positions) const;
  bool has_vision() const { return vision_ || unified_vision_; }
  // Encodes one clip as the checkpoint's processor prepared it (preprocess/audio.py): log-mel features
  // [F, 128] of which the first valid_frames are real (E2B/E4B audio tower + embed_audio), or waveform
  // frames [n, 640] (12B embedder; valid_frames must be n). InputError when there is no audio part.
  AudioOutput encode_audio(const Tensor& features, int64_t valid_frames) const;
  bool has_audio() const { return audio_ || unified_audio_; }
  // The weight-table name of the weight tensor whose memory holds t's first element ("" if none: an
  // activation), for reports.
  std::string weight_name(const Tensor& t) const;
  // MARKBASE_CHECK_FINITE=1 at load: every forward is traced (runtime/nonfinite.h) and raises
  // NumericsError at the first NaN / Inf.
  bool check_finite() const { return check_finite_; }

 private:
  Gemma4Model() = default;
  // Runs an encoder call; under MARKBASE_CHECK_FINITE every op of it is traced (NumericsError at the first
  // NaN / Inf, as for the decoder's forwards).
  template <class F>
  auto checked(F&& encode) const;

  std::string dir_;
  Gemma4Config cfg_;
  io::Checkpoint ckpt_;  // the mappings every bound tensor views
  ModelWeights weights_;
  std::unique_ptr<TextDecoder> text_;
  std::unique_ptr<VisionTower> vision_;
  std::unique_ptr<UnifiedVisionEmbedder> unified_vision_;
  std::unique_ptr<AudioTower> audio_;
  std::unique_ptr<UnifiedAudioEmbedder> unified_audio_;
  Exec exec_;
  int64_t max_context_ = 0;
  bool check_finite_ = false;
  struct WeightSpan {
    const char* begin;
    const char* end;
    std::string name;
  };
  std::vector<WeightSpan> weight_spans_;  // sorted by begin
};

}  // namespace mb::gemma4
