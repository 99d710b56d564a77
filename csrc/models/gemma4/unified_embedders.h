// The 12B (gemma4_unified) encoder-free embedders (spec §5.2, §5.3): a patch embedder for 48-px image
// patches and a projection of raw 640-sample waveform frames. Their weights and names; the forward passes
// land with the images and audio issues.
#pragma once
#include "core/arena.h"
#include "core/tensor.h"
#include "models/gemma4/config.h"
#include "models/gemma4/audio.h"
#include "models/gemma4/vision.h"
#include "models/gemma4/weights.h"
#include "ops/exec.h"

namespace mb::gemma4 {

struct UnifiedVisionWeights {
  Tensor patch_ln1_weight, patch_ln1_bias;  // LayerNorm over 3·mp² (eps 1e-5)
  Tensor patch_dense_weight, patch_dense_bias;  // [E, 3·mp²], [E]
  Tensor patch_ln2_weight, patch_ln2_bias;  // [E]
  Tensor pos_embedding;                     // [mm_posemb_size, 2, E]
  Tensor pos_norm_weight, pos_norm_bias;    // [E]
  Tensor embedding_projection;              // multimodal_embedder.embedding_projection: [H_text, output_proj_dims]
};

struct UnifiedAudioWeights {
  Tensor embedding_projection;  // model.embed_audio.embedding_projection: [H_text, audio_embed_dim]
};

// Names "model.embed_vision." tensors (the released checkpoint spells most of them
// "model.vision_embedder.*", transformers renames them at load) and "model.embed_audio." ones.
void visit_weights(const UnifiedVisionConfig& cfg, int64_t text_hidden, UnifiedVisionWeights& w, const WeightScope& s);
void visit_weights(const UnifiedAudioConfig& cfg, int64_t text_hidden, UnifiedAudioWeights& w, const WeightScope& s);

// The 12B's vision embedder (spec §5.2): merged 48-px patches → LayerNorm → dense → LayerNorm
// → + factorized position embedding → LayerNorm → weightless RMSNorm → projection. No attention: each
// patch is one soft token.
class UnifiedVisionEmbedder {
 public:
  UnifiedVisionEmbedder(const UnifiedVisionConfig& cfg, const UnifiedVisionWeights& w, Exec exec);
  // pixels: [n, 3·model_patch²] f32 in [0, 1]; positions: [n, 2] i32 (x, y) of the merged patches.
  // out.pooled: the features before the projection [n, mm_embed_dim]; out.soft: [n, H_text].
  VisionOutput encode(const Tensor& pixels, const Tensor& positions) const;

 private:
  void forward(Arena& A, const Exec& ex, const Tensor& pixels, const Tensor& positions, VisionOutput& out) const;

  UnifiedVisionConfig cfg_;
  UnifiedVisionWeights w_;
  Exec ex_;
  Tensor pos_x_, pos_y_;  // pos_embedding[:, 0, :] and [:, 1, :] as contiguous [mm_posemb_size, E] tables
};

// The 12B's audio embedder (spec §5.3): each 640-sample waveform frame → weightless RMSNorm → projection.
class UnifiedAudioEmbedder {
 public:
  UnifiedAudioEmbedder(const UnifiedAudioConfig& cfg, const UnifiedAudioWeights& w, Exec exec);
  // frames: [n, audio_embed_dim] f32 (the waveform zero-padded to whole frames); all n are tokens.
  // out.soft: [n, H_text]; out.hidden is left undefined (there is no tower).
  AudioOutput encode(const Tensor& frames) const;

 private:
  UnifiedAudioConfig cfg_;
  UnifiedAudioWeights w_;
  Exec ex_;
};

}  // namespace mb::gemma4
