#include "models/gemma4/audio.h"

#include "core/errors.h"

namespace mb::gemma4 {

namespace {

void visit_ffw(const WeightScope& s, AudioFeedForwardWeights& f, const std::string& name, int64_t Hd, bool clip) {
  visit_clippable(s, f.ffw_layer_1, name + ".ffw_layer_1", {4 * Hd, Hd}, clip);
  visit_clippable(s, f.ffw_layer_2, name + ".ffw_layer_2", {Hd, 4 * Hd}, clip);
  s.f32(f.pre_layer_norm, name + ".pre_layer_norm.weight", {Hd});
  s.f32(f.post_layer_norm, name + ".post_layer_norm.weight", {Hd});
}

}  // namespace

void visit_weights(const AudioConfig& a, int64_t text_hidden, AudioWeights& w, const WeightScope& tower,
                   const WeightScope& embedder) {
  const int64_t Hd = a.hidden_size, c0 = a.subsampling_conv_channels[0], c1 = a.subsampling_conv_channels[1];
  const bool clip = a.use_clipped_linears;
  const WeightScope sub = tower.at("subsample_conv_projection.", -1);
  sub.tensor(w.layer0_conv, "layer0.conv.weight", {c0, 1, 3, 3});
  sub.f32(w.layer0_norm, "layer0.norm.weight", {c0});
  sub.tensor(w.layer1_conv, "layer1.conv.weight", {c1, c0, 3, 3});
  sub.f32(w.layer1_norm, "layer1.norm.weight", {c1});
  // transformers sizes the input projection from channels[0] (it equals the 128 mel bins), spec §4.2
  sub.tensor(w.input_proj_linear, "input_proj_linear.weight", {Hd, (c0 / 4) * c1});
  w.layers.resize(size_t(a.num_hidden_layers));
  for (int64_t i = 0; i < a.num_hidden_layers; ++i) {
    AudioLayerWeights& lw = w.layers[size_t(i)];
    const WeightScope s = tower.at(cat("layers.", i, "."), i);
    visit_ffw(s, lw.feed_forward1, "feed_forward1", Hd, clip);
    visit_ffw(s, lw.feed_forward2, "feed_forward2", Hd, clip);
    visit_clippable(s, lw.q_proj, "self_attn.q_proj", {Hd, Hd}, clip);
    visit_clippable(s, lw.k_proj, "self_attn.k_proj", {Hd, Hd}, clip);
    visit_clippable(s, lw.v_proj, "self_attn.v_proj", {Hd, Hd}, clip);
    visit_clippable(s, lw.post, "self_attn.post", {Hd, Hd}, clip);
    s.tensor(lw.relative_k_proj, "self_attn.relative_k_proj.weight", {Hd, Hd});
    s.f32(lw.per_dim_scale, "self_attn.per_dim_scale", {Hd / a.num_attention_heads});
    visit_clippable(s, lw.linear_start, "lconv1d.linear_start", {2 * Hd, Hd}, clip);
    visit_clippable(s, lw.linear_end, "lconv1d.linear_end", {Hd, Hd}, clip);
    s.tensor(lw.depthwise_conv1d, "lconv1d.depthwise_conv1d.weight", {Hd, 1, a.conv_kernel_size});
    s.f32(lw.lconv_pre_layer_norm, "lconv1d.pre_layer_norm.weight", {Hd});
    s.f32(lw.conv_norm, "lconv1d.conv_norm.weight", {Hd});
    s.f32(lw.norm_pre_attn, "norm_pre_attn.weight", {Hd});
    s.f32(lw.norm_post_attn, "norm_post_attn.weight", {Hd});
    s.f32(lw.norm_out, "norm_out.weight", {Hd});
  }
  tower.tensor(w.output_proj_weight, "output_proj.weight", {a.output_proj_dims, Hd});
  tower.tensor(w.output_proj_bias, "output_proj.bias", {a.output_proj_dims});
  embedder.tensor(w.embedding_projection, "embedding_projection.weight", {text_hidden, a.output_proj_dims});
}

}  // namespace mb::gemma4
