// Gemma 4 vision tower (E2B/E4B/26B/31B, spec §3): the weights it reads and their names. The forward
// pass (patch embedder, 2-D rope encoder layers, pooling, standardize, embed_vision) lands with the
// images issue; the table already lets `validate` check a checkpoint's vision tensors per layer.
#pragma once
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"
#include "ops/exec.h"
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

namespace mb::gemma4 {

// What encoding one image gives.
struct VisionOutput {
  Tensor pooled;  // [n, D] f32: pooled · sqrt(D), standardized on 26B/31B (transformers' vision_tower output)
  Tensor soft;    // [n, H_text] f32: embed_vision(pooled), the soft tokens that replace the placeholders
};

// The vision tower and embed_vision (spec §3.2–3.6) over one image's real patches: the padding rows
// transformers adds are masked keys and zero pooling inputs there, so leaving them out is exact.
class VisionTower {
 public:
  VisionTower(const VisionConfig& cfg, const VisionWeights& w, Exec exec);

  // pixels: [N, 3·patch²] f32 in [0, 1] (ProcessedImage.pixel_values); positions: [N, 2] i32 (x, y) of a
  // full row-major patch grid whose sides are multiples of pooling_kernel_size. N / k² soft tokens.
  VisionOutput encode(const Tensor& pixels, const Tensor& positions) const;

 private:
  // The whole forward on `ex` with activations from `A`; writes out.pooled and out.soft.
  void forward(Arena& A, const Exec& ex, const Tensor& pixels, const Tensor& positions, VisionOutput& out) const;

  VisionConfig cfg_;
  VisionWeights w_;
  Exec ex_;
  Tensor neg_std_bias_;  // −std_bias (standardize as x + (−b), exactly x − b)
};

}  // namespace mb::gemma4
