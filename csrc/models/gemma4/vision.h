// Gemma 4 vision tower (E2B/E4B/26B/31B, spec §3): the weights it reads and their names. The forward
// pass (patch embedder, 2-D rope encoder layers, pooling, standardize, embed_vision) lands with the
// images issue; the table already lets `validate` check a checkpoint's vision tensors per layer.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "models/gemma4/config.h"
#include "models/gemma4/weights.h"

namespace mb::gemma4 {

struct VisionLayerWeights {
  ClippableLinear q_proj, k_proj, v_proj, o_proj;  // self_attn.*: [heads·d, D] / [D, heads·d]
  Tensor q_norm, k_norm;                           // [d] f32
  ClippableLinear gate_proj, up_proj, down_proj;   // mlp.*: [I, D], [I, D], [D, I]
  Tensor input_layernorm, post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm;  // [D] f32
};

struct VisionWeights {
  Tensor input_proj;                // patch_embedder.input_proj: [D, 3·patch²]
  Tensor position_embedding_table;  // patch_embedder: [2, position_embedding_size, D]
  Tensor std_bias, std_scale;       // [D] f32, standardize only (26B/31B)
  std::vector<VisionLayerWeights> layers;
  Tensor embedding_projection;      // model.embed_vision.embedding_projection: [H_text, D]
};

// `tower` names "model.vision_tower." tensors; `embedder` names "model.embed_vision." ones.
void visit_weights(const VisionConfig& cfg, int64_t text_hidden, VisionWeights& w, const WeightScope& tower,
                   const WeightScope& embedder);

}  // namespace mb::gemma4
