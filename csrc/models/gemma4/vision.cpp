#include "models/gemma4/vision.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/errors.h"
#include "models/gemma4/encoder_ops.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/pool.h"
#include "ops/rope.h"
#include "ops/sync.h"
#include "runtime/measure.h"
#include "runtime/trace.h"

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


using runtime::name_intermediate;

VisionTower::VisionTower(const VisionConfig& cfg, const VisionWeights& w, Exec exec) : cfg_(cfg), w_(w), ex_(exec) {
  if (cfg_.standardize && w_.std_bias.defined()) {
    neg_std_bias_ = Tensor::empty(DType::F32, w_.std_bias.shape());
    const float* b = w_.std_bias.data_as<const float>();
    for (int64_t i = 0; i < w_.std_bias.numel(); ++i) neg_std_bias_.data_as<float>()[i] = -b[i];
  }
}

void VisionTower::forward(Arena& A, const Exec& ex, const Tensor& pixels, const Tensor& positions, VisionOutput& out) const {
  const int64_t N = pixels.size(0), K = pixels.size(1), D = cfg_.hidden_size, I = cfg_.intermediate_size;
  const int64_t nh = cfg_.num_attention_heads, nkv = cfg_.num_key_value_heads, hd = cfg_.head_dim;
  const int64_t k = cfg_.pooling_kernel_size, M = N / (k * k);
  const float eps = float(cfg_.rms_norm_eps);
  ops::CommandScope scope(ex);
  A.reset();

  // Host-staged inputs (written before any op is encoded): 2·(pixel − 0.5) as the patch embedder does it,
  // the x and y position ids, 0 … N−1 for the attention positions, each patch's pooling block.
  Tensor px = A.tensor(DType::F32, {N, K});
  const float* src = pixels.data_as<const float>();
  for (int64_t i = 0; i < N * K; ++i) px.data_as<float>()[i] = 2.0f * (src[i] - 0.5f);
  Tensor pos = A.tensor(DType::I32, {N, 2}), pos_x = A.tensor(DType::I32, {N}), pos_y = A.tensor(DType::I32, {N});
  Tensor seq = A.tensor(DType::I32, {N}), block = A.tensor(DType::I32, {N});
  const int32_t* p = positions.data_as<const int32_t>();
  int32_t width = 0;
  for (int64_t i = 0; i < N; ++i) width = std::max(width, p[2 * i] + 1);
  for (int64_t i = 0; i < N; ++i) {
    const int32_t x = p[2 * i], y = p[2 * i + 1];
    pos.data_as<int32_t>()[2 * i] = x;
    pos.data_as<int32_t>()[2 * i + 1] = y;
    pos_x.data_as<int32_t>()[i] = x;
    pos_y.data_as<int32_t>()[i] = y;
    seq.data_as<int32_t>()[i] = int32_t(i);
    block.data_as<int32_t>()[i] = int32_t(x / k + (width / k) * (y / k));  // 3×3 blocks, row-major
  }

  // Patch embedder: input_proj(px) + (PE[0][x] + PE[1][y])
  Tensor h = A.tensor(DType::F32, {N, D});
  ops::linear(px, w_.input_proj, nullptr, h, ex);
  Tensor ex_emb = A.tensor(DType::F32, {N, D}), ey_emb = A.tensor(DType::F32, {N, D});
  ops::embedding(w_.position_embedding_table.select(0, 0), pos_x, ex_emb, 1.0f, ex);
  ops::embedding(w_.position_embedding_table.select(0, 1), pos_y, ey_emb, 1.0f, ex);
  ops::binary(ex_emb, ey_emb, ex_emb, ops::BinaryKind::Add, ex);
  ops::binary(h, ex_emb, h, ops::BinaryKind::Add, ex);
  name_intermediate(h, "v_inp_embd", -1);
  const size_t mark = A.mark();

  ops::AttentionParams ap;
  ap.scale = 1.0f;
  ap.causal = false;  // bidirectional over the image's patches
  ap.window = 0;
  for (int64_t l = 0; l < int64_t(w_.layers.size()); ++l) {
    A.reset(mark);
    const VisionLayerWeights& lw = w_.layers[size_t(l)];
    Tensor hn = A.tensor(DType::F32, {N, D});
    ops::rms_norm(h, lw.input_layernorm, eps, hn, ex);
    Tensor q = A.tensor(DType::F32, {N, nh, hd}), kk = A.tensor(DType::F32, {N, nkv, hd}), v = A.tensor(DType::F32, {N, nkv, hd});
    Tensor qf = q.reshape({N, nh * hd}), kf = kk.reshape({N, nkv * hd}), vf = v.reshape({N, nkv * hd});
    Tensor clip_in = A.tensor(DType::F32, {N, D});
    clippable_linear(ex, lw.q_proj, clip_in, hn, qf);
    clippable_linear(ex, lw.k_proj, clip_in, hn, kf);
    clippable_linear(ex, lw.v_proj, clip_in, hn, vf);
    ops::rms_norm(q, lw.q_norm, eps, q, ex);
    ops::rope_2d(q, pos, cfg_.rope_parameters.rope_theta, q, ex);
    ops::rms_norm(kk, lw.k_norm, eps, kk, ex);
    ops::rope_2d(kk, pos, cfg_.rope_parameters.rope_theta, kk, ex);
    ops::rms_norm(v, Tensor(), eps, v, ex);
    Tensor attn = A.tensor(DType::F32, {N, nh, hd});
    ops::attention(q, kk, v, seq, seq, nullptr, nullptr, attn, ap, ex);
    name_intermediate(attn, "v_kqv_out", l);
    Tensor attn_flat = attn.reshape({N, nh * hd});
    Tensor clip_attn = A.tensor(DType::F32, {N, nh * hd});
    Tensor o = A.tensor(DType::F32, {N, D});
    clippable_linear(ex, lw.o_proj, clip_attn, attn_flat, o);
    ops::rms_norm(o, lw.post_attention_layernorm, eps, o, ex);
    name_intermediate(o, "v_attn_out", l);
    ops::binary(h, o, h, ops::BinaryKind::Add, ex);

    ops::rms_norm(h, lw.pre_feedforward_layernorm, eps, hn, ex);
    Tensor g = A.tensor(DType::F32, {N, I}), u = A.tensor(DType::F32, {N, I});
    clippable_linear(ex, lw.gate_proj, clip_in, hn, g);
    clippable_linear(ex, lw.up_proj, clip_in, hn, u);
    ops::unary(g, g, {ops::UnaryKind::GeluTanh}, ex);
    ops::binary(g, u, g, ops::BinaryKind::Mul, ex);
    Tensor clip_g = A.tensor(DType::F32, {N, I});
    Tensor m = A.tensor(DType::F32, {N, D});
    clippable_linear(ex, lw.down_proj, clip_g, g, m);
    ops::rms_norm(m, lw.post_feedforward_layernorm, eps, m, ex);
    name_intermediate(m, "v_ffn_out", l);
    ops::binary(h, m, h, ops::BinaryKind::Add, ex);
    name_intermediate(h, "v_l_out", l);
  }

  // Pooler (f32): mean over each k×k block, · sqrt(D); standardize (26B/31B): (x − std_bias) · std_scale
  A.reset(mark);
  ops::avg_pool_indexed(h, block, M, float(k * k), out.pooled, ex);
  ops::unary(out.pooled, out.pooled, {ops::UnaryKind::Scale, float(std::sqrt(double(D)))}, ex);
  if (cfg_.standardize) {
    ops::binary(out.pooled, neg_std_bias_, out.pooled, ops::BinaryKind::Add, ex);
    ops::binary(out.pooled, w_.std_scale, out.pooled, ops::BinaryKind::Mul, ex);
  }
  name_intermediate(out.pooled, "v_pooled", -1);
  // embed_vision: weightless RMSNorm, then the projection into the text model's width
  Tensor normed = A.tensor(DType::F32, {M, D});
  ops::rms_norm(out.pooled, Tensor(), eps, normed, ex);
  ops::linear(normed, w_.embedding_projection, nullptr, out.soft, ex);
  name_intermediate(out.soft, "v_soft_tokens", -1);
  scope.finish();
}

VisionOutput VisionTower::encode(const Tensor& pixels, const Tensor& positions) const {
  const int64_t patch_dim = 3 * cfg_.patch_size * cfg_.patch_size, k = cfg_.pooling_kernel_size;
  if (pixels.dtype() != DType::F32 || pixels.dim() != 2 || pixels.size(1) != patch_dim || !pixels.is_contiguous())
    throw InputError(cat("vision: pixel_values must be f32 [N, ", patch_dim, "] contiguous, got ", pixels.describe()));
  const int64_t N = pixels.size(0);
  if (positions.dtype() != DType::I32 || positions.shape() != Shape{N, 2} || !positions.is_contiguous())
    throw InputError(cat("vision: positions must be i32 [", N, ", 2] contiguous, got ", positions.describe()));
  // The patches must be a full row-major grid whose sides are multiples of k (what the processor makes).
  const int32_t* p = positions.data_as<const int32_t>();
  int64_t W = 0;
  while (W < N && p[2 * W + 1] == 0) ++W;
  if (N == 0 || W == 0 || N % W || W % k || (N / W) % k)
    throw InputError(cat("vision: ", N, " patches do not form a grid whose sides are multiples of ", k));
  const int64_t H = N / W;
  for (int64_t i = 0; i < N; ++i)
    if (p[2 * i] != i % W || p[2 * i + 1] != i / W)
      throw InputError(cat("vision: positions[", i, "] = (", p[2 * i], ", ", p[2 * i + 1], ") is not (", i % W, ", ", i / W,
                           "): the patches must be the row-major grid of one image"));
  if (W > cfg_.position_embedding_size || H > cfg_.position_embedding_size)
    throw InputError(cat("vision: a ", W, "×", H, "-patch grid exceeds the position table (", cfg_.position_embedding_size,
                         " per axis)"));
  const int64_t M = N / (k * k), H_text = w_.embedding_projection.size(0);

  // Size the activations by a measuring pass at this N (nothing runs), then run for real.
  const size_t need = runtime::measure_arena_bytes([&](Arena& activations, Arena& outputs) {
    VisionOutput o{outputs.tensor(DType::F32, {M, cfg_.hidden_size}), outputs.tensor(DType::F32, {M, H_text})};
    forward(activations, runtime::measure_exec(), pixels, positions, o);
  });
  Arena A(need);
  VisionOutput out{Tensor::empty(DType::F32, {M, cfg_.hidden_size}), Tensor::empty(DType::F32, {M, H_text})};
  forward(A, ex_, pixels, positions, out);
  return out;
}

}  // namespace mb::gemma4
