// Gemma 4 audio tower (E2B/E4B, spec §4: subsampling convs + conformer): the weights it reads and their
// names. The forward pass lands with the audio issue; the table already lets `validate` check a
// checkpoint's audio tensors per layer.
#pragma once
#include <vector>

#include "core/tensor.h"
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

}  // namespace mb::gemma4
