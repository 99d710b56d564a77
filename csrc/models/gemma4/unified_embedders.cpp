#include "models/gemma4/unified_embedders.h"

#include <cmath>
#include <cstring>
#include <memory>

#include "core/errors.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/sync.h"
#include "runtime/measure.h"
#include "runtime/trace.h"

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

namespace mb::gemma4 {

using runtime::name_intermediate;

UnifiedVisionEmbedder::UnifiedVisionEmbedder(const UnifiedVisionConfig& cfg, const UnifiedVisionWeights& w, Exec exec)
    : cfg_(cfg), w_(w), ex_(exec) {
  pos_x_ = w_.pos_embedding.select(1, 0).contiguous();
  pos_y_ = w_.pos_embedding.select(1, 1).contiguous();
}

void UnifiedVisionEmbedder::forward(Arena& A, const Exec& ex, const Tensor& pixels, const Tensor& positions,
                                    VisionOutput& out) const {
  const int64_t n = pixels.size(0), E = cfg_.mm_embed_dim;
  constexpr float kLayerNormEps = 1e-5f;  // nn.LayerNorm's default, as the 12B embedder uses
  ops::CommandScope scope(ex);
  A.reset();
  Tensor px = A.tensor(DType::F32, {n, pixels.size(1)});
  std::memcpy(px.data(), pixels.data(), px.nbytes());
  Tensor pos_x = A.tensor(DType::I32, {n}), pos_y = A.tensor(DType::I32, {n});
  const int32_t* p = positions.data_as<const int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    pos_x.data_as<int32_t>()[i] = p[2 * i];
    pos_y.data_as<int32_t>()[i] = p[2 * i + 1];
  }
  ops::layer_norm(px, w_.patch_ln1_weight, w_.patch_ln1_bias, kLayerNormEps, px, ex);
  Tensor h = A.tensor(DType::F32, {n, E});
  ops::linear(px, w_.patch_dense_weight, &w_.patch_dense_bias, h, ex);
  ops::layer_norm(h, w_.patch_ln2_weight, w_.patch_ln2_bias, kLayerNormEps, h, ex);
  Tensor ex_emb = A.tensor(DType::F32, {n, E}), ey_emb = A.tensor(DType::F32, {n, E});
  ops::embedding(pos_x_, pos_x, ex_emb, 1.0f, ex);
  ops::embedding(pos_y_, pos_y, ey_emb, 1.0f, ex);
  ops::binary(ex_emb, ey_emb, ex_emb, ops::BinaryKind::Add, ex);
  ops::binary(h, ex_emb, h, ops::BinaryKind::Add, ex);
  ops::layer_norm(h, w_.pos_norm_weight, w_.pos_norm_bias, kLayerNormEps, out.pooled, ex);
  name_intermediate(out.pooled, "v_embd", -1);
  Tensor normed = A.tensor(DType::F32, {n, E});
  ops::rms_norm(out.pooled, Tensor(), float(cfg_.rms_norm_eps), normed, ex);
  ops::linear(normed, w_.embedding_projection, nullptr, out.soft, ex);
  name_intermediate(out.soft, "v_soft_tokens", -1);
  scope.finish();
}

VisionOutput UnifiedVisionEmbedder::encode(const Tensor& pixels, const Tensor& positions) const {
  const int64_t mp = cfg_.model_patch_size(), patch_dim = 3 * mp * mp;
  if (pixels.dtype() != DType::F32 || pixels.dim() != 2 || pixels.size(1) != patch_dim || !pixels.is_contiguous())
    throw InputError(cat("vision: pixel_values must be f32 [n, ", patch_dim, "] contiguous, got ", pixels.describe()));
  const int64_t n = pixels.size(0);
  if (n < 1) throw InputError("vision: no patches");
  if (positions.dtype() != DType::I32 || positions.shape() != Shape{n, 2} || !positions.is_contiguous())
    throw InputError(cat("vision: positions must be i32 [", n, ", 2] contiguous, got ", positions.describe()));
  const int32_t* p = positions.data_as<const int32_t>();
  for (int64_t i = 0; i < 2 * n; ++i)
    if (p[i] < 0 || p[i] >= cfg_.mm_posemb_size)
      throw InputError(cat("vision: patch position ", p[i], " (patch ", i / 2, ") is outside the position table [0, ",
                           cfg_.mm_posemb_size, ")"));
  const int64_t E = cfg_.mm_embed_dim, H_text = w_.embedding_projection.size(0);
  const size_t need = runtime::measure_arena_bytes([&](Arena& activations, Arena& outputs) {
    VisionOutput o{outputs.tensor(DType::F32, {n, E}), outputs.tensor(DType::F32, {n, H_text})};
    forward(activations, runtime::measure_exec(), pixels, positions, o);
  });
  Arena A(need);
  VisionOutput out{Tensor::empty(DType::F32, {n, E}), Tensor::empty(DType::F32, {n, H_text})};
  forward(A, ex_, pixels, positions, out);
  return out;
}

UnifiedAudioEmbedder::UnifiedAudioEmbedder(const UnifiedAudioConfig& cfg, const UnifiedAudioWeights& w, Exec exec)
    : cfg_(cfg), w_(w), ex_(exec) {}

AudioOutput UnifiedAudioEmbedder::encode(const Tensor& frames) const {
  const int64_t E = cfg_.audio_embed_dim;
  if (frames.dtype() != DType::F32 || frames.dim() != 2 || frames.size(1) != E || !frames.is_contiguous())
    throw InputError(cat("audio: waveform frames must be f32 [n, ", E, "] contiguous, got ", frames.describe()));
  const int64_t n = frames.size(0), H_text = w_.embedding_projection.size(0);
  if (n < 1) throw InputError("audio: no waveform frames (an empty clip)");
  const float* fp = frames.data_as<const float>();
  for (int64_t i = 0; i < frames.numel(); ++i)
    if (!std::isfinite(fp[i])) throw InputError(cat("audio: frames[", i / E, ", ", i % E, "] = ", fp[i], " is not finite"));
  AudioOutput out{Tensor(), Tensor::empty(DType::F32, {n, H_text})};
  ops::CommandScope scope(ex_);
  Tensor staged = Tensor::empty(DType::F32, {n, E}), normed = Tensor::empty(DType::F32, {n, E});
  std::memcpy(staged.data(), frames.data(), staged.nbytes());
  ops::rms_norm(staged, Tensor(), float(cfg_.rms_norm_eps), normed, ex_);
  ops::linear(normed, w_.embedding_projection, nullptr, out.soft, ex_);
  name_intermediate(out.soft, "a_soft_tokens", -1);
  scope.finish();
  return out;
}

}  // namespace mb::gemma4
