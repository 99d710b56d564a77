// Gemma 4 audio tower (E2B/E4B, spec §4): subsampling convs + a 12-layer conformer + embed_audio. The
// weights it reads and their names, and the forward pass over one clip's log-mel features.
#pragma once
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"
#include "ops/exec.h"
#include "models/gemma4/config.h"
#include "models/gemma4/weights.h"

namespace mb::gemma4 {

struct AudioFeedForwardWeights {
  ClippableLinear ffw_layer_1, ffw_layer_2;  // [4·Hd, Hd], [Hd, 4·Hd]
  Tensor pre_layer_norm, post_layer_norm;    // [Hd] f32
};

struct AudioLayerWeights {
  AudioFeedForwardWeights feed_forward1, feed_forward2;
  ClippableLinear q_proj, k_proj, v_proj, post;  // self_attn.*: [Hd, Hd]
  Tensor relative_k_proj;                        // self_attn.relative_k_proj: [Hd, Hd], plain linear
  Tensor per_dim_scale;                          // self_attn: [head_dim] f32 (through softplus)
  ClippableLinear linear_start, linear_end;      // lconv1d.*: [2·Hd, Hd], [Hd, Hd]
  Tensor depthwise_conv1d;                       // lconv1d: [Hd, 1, K]
  Tensor lconv_pre_layer_norm, conv_norm;        // lconv1d.*: [Hd] f32
  Tensor norm_pre_attn, norm_post_attn, norm_out;  // [Hd] f32
};

struct AudioWeights {
  Tensor layer0_conv, layer0_norm;  // subsample_conv_projection.layer0: [c0, 1, 3, 3], [c0] f32
  Tensor layer1_conv, layer1_norm;  // layer1: [c1, c0, 3, 3], [c1] f32
  Tensor input_proj_linear;         // [Hd, (c0 / 4)·c1]
  std::vector<AudioLayerWeights> layers;
  Tensor output_proj_weight, output_proj_bias;  // [out, Hd], [out]
  Tensor embedding_projection;                  // model.embed_audio.embedding_projection: [H_text, out]
};

// `tower` names "model.audio_tower." tensors; `embedder` names "model.embed_audio." ones.
void visit_weights(const AudioConfig& cfg, int64_t text_hidden, AudioWeights& w, const WeightScope& tower,
                   const WeightScope& embedder);

// What encoding one clip gives (its valid tokens only).
struct AudioOutput {
  Tensor hidden;  // [n, output_proj_dims] f32: the tower's last_hidden_state (undefined on the 12B)
  Tensor soft;    // [n, H_text] f32: the soft tokens that replace the <|audio|> placeholders
};

// Soft tokens of a clip with `valid_frames` valid mel frames: two stride-2 convs, ceil(ceil(n / 2) / 2).
int64_t audio_tokens_for_frames(int64_t valid_frames);

// The audio tower and embed_audio (spec §4.2–4.5) over one clip. Only the valid tokens are computed after
// the subsampling convs: every later block is causal or per-row (attention looks back, the depthwise conv
// is left-padded), so the padded tail transformers carries along cannot reach a valid token.
class AudioTower {
 public:
  AudioTower(const AudioConfig& cfg, const AudioWeights& w, Exec exec);

  // features: [F, n_mel] f32 log-mel frames (preprocess/audio.py); the first `valid_frames` are real (the
  // feature extractor's mask), the rest are zeroed here as transformers does before each conv.
  AudioOutput encode(const Tensor& features, int64_t valid_frames) const;

 private:
  void forward(Arena& A, const Exec& ex, const Tensor& features, int64_t valid_frames, AudioOutput& out) const;
  void feed_forward(Arena& A, const Exec& ex, const AudioFeedForwardWeights& f, Tensor& x) const;
  void attention(Arena& A, const Exec& ex, const AudioLayerWeights& lw, size_t layer, Tensor& x) const;
  void light_conv(Arena& A, const Exec& ex, const AudioLayerWeights& lw, size_t layer, Tensor& x) const;
  void clip(const Exec& ex, const Tensor& x, Tensor& out) const;  // the conformer's clamp to ±gradient_clipping

  AudioConfig cfg_;
  AudioWeights w_;
  Exec ex_;
  int64_t window_ = 0;                 // keys per query, self included: attention_context_left − 1
  Tensor rel_positions_;               // [window, Hd] f32: [sin(δ·inv), cos(δ·inv)] for distances δ = 0..window−1
  std::vector<Tensor> q_dim_scale_;    // per layer [head_dim] f32: softplus(per_dim_scale)
  std::vector<ClippableLinear> glu_value_, glu_gate_;  // per layer: linear_start's two output halves
};

}  // namespace mb::gemma4
