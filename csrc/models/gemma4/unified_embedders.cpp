#include "models/gemma4/unified_embedders.h"

namespace mb::gemma4 {

void visit_weights(const UnifiedVisionConfig& v, int64_t text_hidden, UnifiedVisionWeights& w, const WeightScope& s) {
  const int64_t mp = v.model_patch_size(), flat = 3 * mp * mp, E = v.mm_embed_dim;
  // name in transformers -> the released checkpoint's spelling (conversion_mapping renames these at load)
  auto renamed = [](const std::string& name) { return std::vector<std::string>{"model.vision_embedder." + name}; };
  s.tensor(w.patch_ln1_weight, "patch_ln1.weight", {flat}, renamed("patch_ln1.weight"));
  s.tensor(w.patch_ln1_bias, "patch_ln1.bias", {flat}, renamed("patch_ln1.bias"));
  s.tensor(w.patch_dense_weight, "patch_dense.weight", {E, flat}, renamed("patch_dense.weight"));
  s.tensor(w.patch_dense_bias, "patch_dense.bias", {E}, renamed("patch_dense.bias"));
  s.tensor(w.patch_ln2_weight, "patch_ln2.weight", {E}, renamed("patch_ln2.weight"));
  s.tensor(w.patch_ln2_bias, "patch_ln2.bias", {E}, renamed("patch_ln2.bias"));
  s.tensor(w.pos_embedding, "pos_embedding", {v.mm_posemb_size, 2, E}, renamed("pos_embedding"));
  s.tensor(w.pos_norm_weight, "pos_norm.weight", {E}, renamed("pos_norm.weight"));
  s.tensor(w.pos_norm_bias, "pos_norm.bias", {E}, renamed("pos_norm.bias"));
  s.tensor(w.embedding_projection, "multimodal_embedder.embedding_projection.weight", {text_hidden, v.output_proj_dims},
           {"model.embed_vision.embedding_projection.weight"});
}

void visit_weights(const UnifiedAudioConfig& a, int64_t text_hidden, UnifiedAudioWeights& w, const WeightScope& s) {
  s.tensor(w.embedding_projection, "embedding_projection.weight", {text_hidden, a.audio_embed_dim});
}

}  // namespace mb::gemma4
