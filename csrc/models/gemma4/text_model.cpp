#include "models/gemma4/text_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/errors.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/moe.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/shape.h"
#include "ops/softmax.h"
#include "ops/sync.h"
#include "ops/topk.h"

namespace mb::gemma4 {

namespace {

const Tensor& need(const std::map<std::string, Tensor>& w, const std::string& name) {
  auto it = w.find(name);
  if (it == w.end()) throw CheckpointError(cat("text decoder: missing tensor ", name));
  return it->second;
}

// Small vectors (norm weights, scales) are converted to f32 once at load.
Tensor as_f32(const Tensor& t) { return t.defined() ? t.to(DType::F32) : t; }

void expect_shape(const Tensor& t, const std::string& name, const Shape& shape) {
  if (t.shape() != shape)
    throw CheckpointError(cat("text decoder: tensor ", name, " has shape ", shape_str(t.shape()), ", expected ", shape_str(shape)));
}

}  // namespace

TextModel::TextModel(TextConfig cfg, const std::map<std::string, Tensor>& w, Exec exec) : cfg_(std::move(cfg)), ex_(exec) {
  const int64_t H = cfg_.hidden, L = cfg_.num_layers;
  if (int64_t(cfg_.layers.size()) != L) throw ConfigError("text decoder: layer list does not match num_hidden_layers");
  embed_tokens = need(w, "embed_tokens.weight");
  expect_shape(embed_tokens, "embed_tokens.weight", {cfg_.vocab, H});
  final_norm = as_f32(need(w, "norm.weight"));
  if (cfg_.ple_dim > 0) {
    ple_table = need(w, "embed_tokens_per_layer.weight");
    ple_projection = need(w, "per_layer_model_projection.weight");
    ple_norm = as_f32(need(w, "per_layer_projection_norm.weight"));
    expect_shape(ple_projection, "per_layer_model_projection.weight", {L * cfg_.ple_dim, H});
  }
  layers_.resize(size_t(L));
  for (int64_t l = 0; l < L; ++l) {
    const LayerConfig& lc = cfg_.layers[size_t(l)];
    LayerWeights& lw = layers_[size_t(l)];
    const std::string p = cat("layers.", l, ".");
    lw.input_ln = as_f32(need(w, p + "input_layernorm.weight"));
    lw.post_attn_ln = as_f32(need(w, p + "post_attention_layernorm.weight"));
    lw.pre_ff_ln = as_f32(need(w, p + "pre_feedforward_layernorm.weight"));
    lw.post_ff_ln = as_f32(need(w, p + "post_feedforward_layernorm.weight"));
    Tensor scalar = as_f32(need(w, p + "layer_scalar"));
    if (scalar.numel() != 1) throw CheckpointError(cat("text decoder: ", p, "layer_scalar must hold one value"));
    lw.layer_scalar = scalar.data_as<const float>()[0];
    const int64_t d = lc.head_dim, nh = cfg_.num_heads, kv = lc.num_kv_heads;
    lw.q_proj = need(w, p + "self_attn.q_proj.weight");
    expect_shape(lw.q_proj, p + "self_attn.q_proj.weight", {nh * d, H});
    lw.q_norm = as_f32(need(w, p + "self_attn.q_norm.weight"));
    lw.o_proj = need(w, p + "self_attn.o_proj.weight");
    if (lc.kv_mode != KvMode::Reuse) {
      lw.k_proj = need(w, p + "self_attn.k_proj.weight");
      expect_shape(lw.k_proj, p + "self_attn.k_proj.weight", {kv * d, H});
      lw.k_norm = as_f32(need(w, p + "self_attn.k_norm.weight"));
      if (lc.has_v_proj) lw.v_proj = need(w, p + "self_attn.v_proj.weight");
    }
    lw.gate = need(w, p + "mlp.gate_proj.weight");
    lw.up = need(w, p + "mlp.up_proj.weight");
    lw.down = need(w, p + "mlp.down_proj.weight");
    expect_shape(lw.gate, p + "mlp.gate_proj.weight", {lc.intermediate, H});
    if (cfg_.ple_dim > 0) {
      lw.ple_gate = need(w, p + "per_layer_input_gate.weight");
      lw.ple_proj = need(w, p + "per_layer_projection.weight");
      lw.ple_post_ln = as_f32(need(w, p + "post_per_layer_input_norm.weight"));
    }
    if (cfg_.moe) {
      lw.router_proj = need(w, p + "router.proj.weight");
      lw.router_scale = as_f32(need(w, p + "router.scale"));
      lw.per_expert_scale = as_f32(need(w, p + "router.per_expert_scale"));
      lw.experts_gate_up = need(w, p + "experts.gate_up_proj");
      lw.experts_down = need(w, p + "experts.down_proj");
      expect_shape(lw.experts_gate_up, p + "experts.gate_up_proj", {cfg_.num_experts, 2 * cfg_.moe_intermediate, H});
      expect_shape(lw.experts_down, p + "experts.down_proj", {cfg_.num_experts, H, cfg_.moe_intermediate});
      lw.pre_ff_ln2 = as_f32(need(w, p + "pre_feedforward_layernorm_2.weight"));
      lw.post_ff_ln1 = as_f32(need(w, p + "post_feedforward_layernorm_1.weight"));
      lw.post_ff_ln2 = as_f32(need(w, p + "post_feedforward_layernorm_2.weight"));
    }
    // Sliding layers: default rope over the whole head; full layers: proportional (zeros past n_rot).
    ops::RopeKind kind = lc.rope_kind == "proportional" ? ops::RopeKind::Proportional : ops::RopeKind::Default;
    lw.inv_freq = ops::rope_inv_freq(kind, d, lc.rope_theta, kind == ops::RopeKind::Default ? 1.0 : lc.rope_partial);
    lw.inv_freq_t = Tensor::empty(DType::F32, {int64_t(lw.inv_freq.size())});
    std::memcpy(lw.inv_freq_t.data(), lw.inv_freq.data(), lw.inv_freq.size() * sizeof(float));
  }
  if (cfg_.moe) {
    moe_row_token_ = Tensor::empty(DType::I32, {kMoeGatheredRows});
    for (int64_t r = 0; r < kMoeGatheredRows; ++r) moe_row_token_.data_as<int32_t>()[r] = int32_t(r / cfg_.top_k);
    moe_zeros_ = Tensor::zeros(DType::F32, {kMoeGatheredRows, H});
  }
}

std::unique_ptr<DecoderState> TextModel::new_state(int64_t max_context) const {
  auto st = std::make_unique<DecoderState>();
  st->caches.resize(cfg_.layers.size());
  for (const LayerConfig& lc : cfg_.layers) {
    if (lc.kv_mode == KvMode::Reuse) continue;
    st->caches[size_t(lc.index)] = runtime::LayerKvCache(lc.num_kv_heads, lc.head_dim, lc.sliding ? cfg_.window : 0,
                                                         cfg_.max_chunk, max_context);
  }
  st->arena = std::make_unique<Arena>(arena_bytes(cfg_.max_chunk));
  return st;
}

// Upper bound of the activations one chunk of T tokens allocates (floats per token, plus slack).
size_t TextModel::arena_bytes(int64_t T) const {
  int64_t dmax = 0, kvmax = 0, imax = 0;
  for (const auto& lc : cfg_.layers) {
    dmax = std::max(dmax, lc.head_dim);
    kvmax = std::max(kvmax, lc.num_kv_heads);
    imax = std::max(imax, lc.intermediate);
  }
  const int64_t H = cfg_.hidden, nh = cfg_.num_heads, LP = cfg_.num_layers * cfg_.ple_dim;
  int64_t per_token = 6 * H + 2 * nh * dmax + 3 * kvmax * dmax + 3 * imax + 3 * LP + 2 * cfg_.ple_dim +
                      3 * cfg_.num_experts + 4 * cfg_.top_k + 6 * H + 4 * cfg_.moe_intermediate + 16;
  // The gathered MoE path holds kMoeGatheredRows expert rows whatever T is: [R, H] in and out, [R, 2I]
  // gate|up, [R, I] twice.
  const int64_t moe_gathered = cfg_.moe ? kMoeGatheredRows * (2 * H + 4 * cfg_.moe_intermediate) : 0;
  return size_t(T * per_token + moe_gathered + 2) * sizeof(float) + (1 << 16);
}

Tensor TextModel::forward(DecoderState& st, const std::vector<int32_t>& ids, bool all_logits) const {
  const int64_t T = int64_t(ids.size());
  if (T == 0) throw InputError("forward: no tokens");
  std::vector<Tensor> parts;
  for (int64_t s = 0; s < T; s += cfg_.max_chunk) {
    int64_t n = std::min(cfg_.max_chunk, T - s);
    bool last = s + n == T;
    Tensor lg = forward_chunk(st, ids.data() + s, n, all_logits);
    if (all_logits || last) parts.push_back(lg);
  }
  if (parts.size() == 1) return parts[0];
  Tensor out = Tensor::empty(DType::F32, {T, cfg_.vocab});
  int64_t row = 0;
  for (const Tensor& p : parts) {
    std::memcpy(out.data_as<float>() + row * cfg_.vocab, p.data(), p.nbytes());
    row += p.size(0);
  }
  return out;
}

Tensor TextModel::forward_chunk(DecoderState& st, const int32_t* ids_ptr, int64_t T, bool all_logits) const {
  // One command buffer for the chunk (plus one per MoE layer, see moe_block): ops only encode.
  // The host writes ids and positions below before any op of this chunk is encoded.
  ops::CommandScope scope(ex_);
  Arena& A = *st.arena;
  A.reset();
  const int64_t H = cfg_.hidden, L = cfg_.num_layers, P = cfg_.ple_dim;
  Tensor ids = A.tensor(DType::I32, {T});
  std::memcpy(ids.data(), ids_ptr, size_t(T) * sizeof(int32_t));
  Tensor positions = A.tensor(DType::I32, {T});
  for (int64_t t = 0; t < T; ++t) positions.data_as<int32_t>()[t] = int32_t(st.position + t);

  // h0 = E[ids] · sqrt(H) (scale rounded to the table's dtype)
  Tensor x = A.tensor(DType::F32, {T, H});
  ops::embedding(embed_tokens, ids, x, cfg_.embed_scale, ex_);

  // PLE (spec §2.3): ple = (RMSNorm((h0·Wᵀ)·H^-0.5 per layer slice) + E_ple[ids]·sqrt(P)) · 2^-0.5
  Tensor ple;
  if (P > 0) {
    Tensor tok = A.tensor(DType::F32, {T, L * P});
    ops::embedding(ple_table, ids, tok, cfg_.ple_embed_scale, ex_);
    ple = A.tensor(DType::F32, {T, L * P});
    ops::linear(x, ple_projection, nullptr, ple, ex_);
    ops::unary(ple, ple, {ops::UnaryKind::Scale, float(1.0 / std::sqrt(double(H)))}, ex_);
    Tensor rows = ple.reshape({T * L, P});
    ops::rms_norm(rows, ple_norm, cfg_.eps, rows, ex_);
    ops::binary(ple, tok, ple, ops::BinaryKind::Add, ex_);
    ops::unary(ple, ple, {ops::UnaryKind::Scale, float(std::pow(2.0, -0.5))}, ex_);
  }
  const size_t layer_mark = A.mark();

  for (int64_t l = 0; l < L; ++l) {
    A.reset(layer_mark);
    const LayerWeights& lw = layers_[size_t(l)];
    attention_block(st, l, x, positions, T);
    feed_forward_block(st, l, x, T);
    if (P > 0) {
      // x += RMSNorm(proj(gelu(gate(x)) · ple[:, l]))
      Tensor g = A.tensor(DType::F32, {T, P});
      ops::linear(x, lw.ple_gate, nullptr, g, ex_);
      Tensor ple_l = A.tensor(DType::F32, {T, P});
      ops::copy(ple.reshape({T, L, P}).select(1, l), ple_l, ex_);  // this layer's [T, P] slice
      gelu_gate(g, ple_l);
      Tensor y = A.tensor(DType::F32, {T, H});
      ops::linear(g, lw.ple_proj, nullptr, y, ex_);
      ops::rms_norm(y, lw.ple_post_ln, cfg_.eps, y, ex_);
      ops::binary(x, y, x, ops::BinaryKind::Add, ex_);
    }
    ops::unary(x, x, {ops::UnaryKind::Scale, lw.layer_scalar}, ex_);
  }
  st.position += T;

  A.reset(layer_mark);
  Tensor last = all_logits ? x : x.slice(0, T - 1, T);
  const int64_t R = last.size(0);
  Tensor normed = A.tensor(DType::F32, {R, H});
  ops::rms_norm(last.contiguous(), final_norm, cfg_.eps, normed, ex_);
  Tensor logits = Tensor::empty(DType::F32, {R, cfg_.vocab});
  ops::linear(normed, embed_tokens, nullptr, logits, ex_);  // tied LM head
  if (cfg_.final_softcap > 0.f) ops::unary(logits, logits, {ops::UnaryKind::Softcap, cfg_.final_softcap}, ex_);
  scope.finish();
  return logits;
}

void TextModel::attention_block(DecoderState& st, int64_t l, Tensor& x, const Tensor& positions, int64_t T) const {
  Arena& A = *st.arena;
  const LayerConfig& lc = cfg_.layers[size_t(l)];
  const LayerWeights& lw = layers_[size_t(l)];
  const int64_t H = cfg_.hidden, nh = cfg_.num_heads, d = lc.head_dim, kv = lc.num_kv_heads;

  Tensor h = A.tensor(DType::F32, {T, H});
  ops::rms_norm(x, lw.input_ln, cfg_.eps, h, ex_);

  // q: [T, nh, d], normed per head then rotated
  Tensor q = A.tensor(DType::F32, {T, nh, d});
  Tensor q_flat = q.reshape({T, nh * d});
  ops::linear(h, lw.q_proj, nullptr, q_flat, ex_);
  ops::rms_norm(q, lw.q_norm, cfg_.eps, q, ex_);
  ops::rope(q, positions, lw.inv_freq_t, q, ex_);

  if (lc.kv_mode != KvMode::Reuse) {
    // k: [T, kv, d] = rope(RMSNorm(h·Wkᵀ; k_norm)); v = RMSNorm(h·Wvᵀ) without weight, or of raw k (k=v).
    Tensor k = A.tensor(DType::F32, {T, kv, d});
    Tensor k_flat = k.reshape({T, kv * d});
    ops::linear(h, lw.k_proj, nullptr, k_flat, ex_);
    Tensor v = A.tensor(DType::F32, {T, kv, d});
    if (lc.has_v_proj) {
      Tensor v_flat = v.reshape({T, kv * d});
      ops::linear(h, lw.v_proj, nullptr, v_flat, ex_);
    } else {
      ops::copy(k, v, ex_);  // k=v layers: V is the raw k projection (normed below, never rotated)
    }
    ops::rms_norm(v, Tensor(), cfg_.eps, v, ex_);
    ops::rms_norm(k, lw.k_norm, cfg_.eps, k, ex_);
    ops::rope(k, positions, lw.inv_freq_t, k, ex_);
    st.caches[size_t(l)].append(k, v, st.position, ex_);
  }
  // Reuse layers read the store layer's post-update cache (same positions, same mask).
  const runtime::LayerKvCache& cache = st.caches[size_t(lc.kv_source)];
  ops::AttentionParams ap;
  ap.scale = 1.0f;
  ap.causal = true;
  ap.window = lc.sliding ? cfg_.window : 0;
  Tensor attn = A.tensor(DType::F32, {T, nh, d});
  ops::attention(q, cache.keys(), cache.values(), positions, cache.positions(), nullptr, nullptr, attn, ap, ex_);

  Tensor o = A.tensor(DType::F32, {T, H});
  ops::linear(attn.reshape({T, nh * d}), lw.o_proj, nullptr, o, ex_);
  ops::rms_norm(o, lw.post_attn_ln, cfg_.eps, o, ex_);
  ops::binary(x, o, x, ops::BinaryKind::Add, ex_);
}

void TextModel::feed_forward_block(DecoderState& st, int64_t l, Tensor& x, int64_t T) const {
  Arena& A = *st.arena;
  const LayerConfig& lc = cfg_.layers[size_t(l)];
  const LayerWeights& lw = layers_[size_t(l)];
  const int64_t H = cfg_.hidden, I = lc.intermediate;

  Tensor h = A.tensor(DType::F32, {T, H});
  ops::rms_norm(x, lw.pre_ff_ln, cfg_.eps, h, ex_);
  // m = down(gelu_tanh(gate(h)) · up(h))
  Tensor g = A.tensor(DType::F32, {T, I});
  Tensor u = A.tensor(DType::F32, {T, I});
  ops::linear(h, lw.gate, nullptr, g, ex_);
  ops::linear(h, lw.up, nullptr, u, ex_);
  gelu_gate(g, u);
  Tensor m = A.tensor(DType::F32, {T, H});
  ops::linear(g, lw.down, nullptr, m, ex_);
  if (cfg_.moe) moe_block(st, l, x, m, T);
  ops::rms_norm(m, lw.post_ff_ln, cfg_.eps, m, ex_);
  ops::binary(x, m, x, ops::BinaryKind::Add, ex_);
}

// m ← RMSNorm(m; post_ff_ln1) + RMSNorm(Σ_j w_j · expert_j(RMSNorm(r; pre_ff_ln2)); post_ff_ln2), spec §2.8.
void TextModel::moe_block(DecoderState& st, int64_t l, const Tensor& r, Tensor& m, int64_t T) const {
  Arena& A = *st.arena;
  const LayerWeights& lw = layers_[size_t(l)];
  const int64_t H = cfg_.hidden, E = cfg_.num_experts, K = cfg_.top_k;

  ops::rms_norm(m, lw.post_ff_ln1, cfg_.eps, m, ex_);

  // Router on the residual stream: probs = softmax((RMSNorm(r) · scale · H^-0.5) · W_routerᵀ) in f32.
  Tensor z = A.tensor(DType::F32, {T, H});
  ops::rms_norm(r, Tensor(), cfg_.eps, z, ex_);
  ops::binary(z, lw.router_scale, z, ops::BinaryKind::Mul, ex_);
  ops::unary(z, z, {ops::UnaryKind::Scale, float(std::pow(double(H), -0.5))}, ex_);
  Tensor scores = A.tensor(DType::F32, {T, E});
  ops::linear(z, lw.router_proj, nullptr, scores, ex_);
  ops::softmax(scores, scores, ex_);
  Tensor top_w = A.tensor(DType::F32, {T, K});
  Tensor top_i = A.tensor(DType::I32, {T, K});
  ops::topk(scores, K, top_w, top_i, ex_);
  // Renormalise the top-k to sum 1, fold in the learned per-expert scale; rows ordered by expert id.
  ops::route_weights(top_w, top_i, lw.per_expert_scale, top_w, top_i, ex_);

  Tensor e_in = A.tensor(DType::F32, {T, H});
  ops::rms_norm(r, lw.pre_ff_ln2, cfg_.eps, e_in, ex_);
  Tensor acc = A.tensor(DType::F32, {T, H});
  if (T * K <= kMoeGatheredRows) moe_experts_gathered(st, lw, e_in, top_w, top_i, acc, T);
  else moe_experts_grouped(st, lw, e_in, top_w, top_i, acc, T);
  ops::rms_norm(acc, lw.post_ff_ln2, cfg_.eps, acc, ex_);
  ops::binary(m, acc, m, ops::BinaryKind::Add, ex_);
}

// g ← gelu_tanh(g) · u, the gated activation (dense and expert MLPs, the per-layer input gate).
void TextModel::gelu_gate(Tensor& g, const Tensor& u) const {
  ops::unary(g, g, {ops::UnaryKind::GeluTanh}, ex_);
  ops::binary(g, u, g, ops::BinaryKind::Mul, ex_);
}

void TextModel::moe_experts_gathered(DecoderState& st, const LayerWeights& lw, const Tensor& e_in, const Tensor& top_w,
                                     const Tensor& top_i, Tensor& acc, int64_t T) const {
  Arena& A = *st.arena;
  const int64_t H = cfg_.hidden, K = cfg_.top_k, I = cfg_.moe_intermediate, R = T * K;
  const Tensor row_token = moe_row_token_.slice(0, 0, R);  // row r = t·K + j is token t's j-th expert
  const Tensor expert_of_row = top_i.reshape({R}), weight_of_row = top_w.reshape({R});
  Tensor rows_in = A.tensor(DType::F32, {R, H});
  ops::embedding(e_in, row_token, rows_in, 1.0f, ex_);  // each token's row once per chosen expert
  Tensor gu = A.tensor(DType::F32, {R, 2 * I});
  ops::linear_gathered(rows_in, lw.experts_gate_up, expert_of_row, gu, ex_);
  // [gate | up] = gu split along the last dim; a = gelu_tanh(gate) · up
  Tensor a = A.tensor(DType::F32, {R, I}), up = A.tensor(DType::F32, {R, I});
  ops::copy(gu.slice(1, 0, I), a, ex_);
  ops::copy(gu.slice(1, I, 2 * I), up, ex_);
  gelu_gate(a, up);
  Tensor out = A.tensor(DType::F32, {R, H});
  ops::linear_gathered(a, lw.experts_down, expert_of_row, out, ex_);
  // acc[t] = Σ_j w · out over token t's rows, j in increasing expert id (route_weights sorted them).
  ops::copy(moe_zeros_.slice(0, 0, T), acc, ex_);
  ops::index_add(acc, row_token, out, &weight_of_row, ex_);
}

void TextModel::moe_experts_grouped(DecoderState& st, const LayerWeights& lw, const Tensor& e_in, const Tensor& top_w,
                                    const Tensor& top_i, Tensor& acc, int64_t T) const {
  Arena& A = *st.arena;
  const int64_t H = cfg_.hidden, E = cfg_.num_experts, K = cfg_.top_k, I = cfg_.moe_intermediate;
  Tensor tok_ids = A.tensor(DType::I32, {T * K});  // the routed tokens, grouped by expert
  Tensor tok_w = A.tensor(DType::F32, {T * K});    // their routing weights, same order
  Tensor rows_in = A.tensor(DType::F32, {T, H});
  Tensor gu = A.tensor(DType::F32, {T, 2 * I});
  Tensor act = A.tensor(DType::F32, {T, I});
  Tensor up_rows = A.tensor(DType::F32, {T, I});
  Tensor rows_out = A.tensor(DType::F32, {T, H});

  // Which tokens each expert gets decides the sizes of the expert dispatches, so the host reads the
  // routing here: one extra command buffer for this layer. Every host write below (acc, tok_ids, tok_w)
  // happens after it and before any op reading them is encoded.
  ops::synchronize(ex_);
  const int32_t* ti = top_i.data_as<const int32_t>();
  const float* tw = top_w.data_as<const float>();
  std::memset(acc.data(), 0, acc.nbytes());
  std::vector<int64_t> expert_start(size_t(E) + 1, 0);  // tokens of expert e: [start[e], start[e + 1])
  for (int64_t i = 0; i < T * K; ++i) ++expert_start[size_t(ti[i]) + 1];
  for (int64_t e = 0; e < E; ++e) expert_start[size_t(e) + 1] += expert_start[size_t(e)];
  {
    std::vector<int64_t> fill(expert_start.begin(), expert_start.end() - 1);
    for (int64_t t = 0; t < T; ++t)  // tokens in increasing order within each expert
      for (int64_t j = 0; j < K; ++j) {
        const int64_t slot = fill[size_t(ti[t * K + j])]++;
        tok_ids.data_as<int32_t>()[slot] = int32_t(t);
        tok_w.data_as<float>()[slot] = tw[t * K + j];
      }
  }

  // Experts in increasing index, each over the tokens routed to it (as transformers accumulates).
  for (int64_t e = 0; e < E; ++e) {
    const int64_t s0 = expert_start[size_t(e)], n = expert_start[size_t(e) + 1] - s0;
    if (n == 0) continue;
    Tensor in = rows_in.slice(0, 0, n), g2 = gu.slice(0, 0, n), a = act.slice(0, 0, n), out = rows_out.slice(0, 0, n);
    Tensor up = up_rows.slice(0, 0, n), idx = tok_ids.slice(0, s0, s0 + n), wts = tok_w.slice(0, s0, s0 + n);
    ops::embedding(e_in, idx, in, 1.0f, ex_);  // gather the routed tokens' rows: [n, H]
    ops::linear(in, lw.experts_gate_up.select(0, e), nullptr, g2, ex_);
    // [gate | up] = g2 split along the last dim; a = gelu_tanh(gate) · up
    ops::copy(g2.slice(1, 0, I), a, ex_);
    ops::copy(g2.slice(1, I, 2 * I), up, ex_);
    gelu_gate(a, up);
    ops::linear(a, lw.experts_down.select(0, e), nullptr, out, ex_);
    ops::index_add(acc, idx, out, &wts, ex_);  // acc[tok] += w · out, in token order
  }
}

}  // namespace mb::gemma4
