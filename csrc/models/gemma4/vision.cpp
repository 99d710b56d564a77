#include "models/gemma4/vision.h"

#include "core/errors.h"

namespace mb::gemma4 {

void visit_weights(const VisionConfig& v, int64_t text_hidden, VisionWeights& w, const WeightScope& tower,
                   const WeightScope& embedder) {
  const int64_t D = v.hidden_size, I = v.intermediate_size, hd = v.head_dim;
  const int64_t q_out = v.num_attention_heads * hd, kv_out = v.num_key_value_heads * hd;
  const bool clip = v.use_clipped_linears;
  tower.tensor(w.input_proj, "patch_embedder.input_proj.weight", {D, 3 * v.patch_size * v.patch_size});
  tower.tensor(w.position_embedding_table, "patch_embedder.position_embedding_table", {2, v.position_embedding_size, D});
  if (v.standardize) {
    tower.f32(w.std_bias, "std_bias", {D});
    tower.f32(w.std_scale, "std_scale", {D});
  }
  w.layers.resize(size_t(v.num_hidden_layers));
  for (int64_t i = 0; i < v.num_hidden_layers; ++i) {
    VisionLayerWeights& lw = w.layers[size_t(i)];
    const WeightScope s = tower.at(cat("encoder.layers.", i, "."), i);
    visit_clippable(s, lw.q_proj, "self_attn.q_proj", {q_out, D}, clip);
    visit_clippable(s, lw.k_proj, "self_attn.k_proj", {kv_out, D}, clip);
    visit_clippable(s, lw.v_proj, "self_attn.v_proj", {kv_out, D}, clip);
    visit_clippable(s, lw.o_proj, "self_attn.o_proj", {D, q_out}, clip);
    visit_clippable(s, lw.gate_proj, "mlp.gate_proj", {I, D}, clip);
    visit_clippable(s, lw.up_proj, "mlp.up_proj", {I, D}, clip);
    visit_clippable(s, lw.down_proj, "mlp.down_proj", {D, I}, clip);
    s.f32(lw.q_norm, "self_attn.q_norm.weight", {hd});
    s.f32(lw.k_norm, "self_attn.k_norm.weight", {hd});
    s.f32(lw.input_layernorm, "input_layernorm.weight", {D});
    s.f32(lw.post_attention_layernorm, "post_attention_layernorm.weight", {D});
    s.f32(lw.pre_feedforward_layernorm, "pre_feedforward_layernorm.weight", {D});
    s.f32(lw.post_feedforward_layernorm, "post_feedforward_layernorm.weight", {D});
  }
  embedder.tensor(w.embedding_projection, "embedding_projection.weight", {text_hidden, D});
}

}  // namespace mb::gemma4
