#include "models/gemma4/text.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/errors.h"
#include "core/mutation.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/moe.h"
#include "ops/norm.h"
#include "ops/quant.h"
#include "ops/rope.h"
#include "ops/shape.h"
#include "ops/softmax.h"
#include "ops/sync.h"
#include "ops/topk.h"
#include "runtime/measure.h"
#include "runtime/trace.h"

namespace mb::gemma4 {

using runtime::name_intermediate;

void visit_weights(const TextConfig& t, TextWeights& w, const WeightScope& s) {
  const int64_t H = t.hidden_size, L = t.num_hidden_layers, P = t.hidden_size_per_layer_input, nh = t.num_attention_heads;
  s.linear(w.embed_tokens, "embed_tokens.weight", {t.vocab_size, H}, QuantRule::Table);
  s.f32(w.norm, "norm.weight", {H});
  if (t.has_ple()) {
    // The PLE table stays as stored, at any MLX width: gathered a row per token, it is never read whole (a
    // lazily touched mapping).
    s.linear(w.embed_tokens_per_layer, "embed_tokens_per_layer.weight", {t.vocab_size_per_layer_input, L * P},
             QuantRule::Gathered);
    s.linear(w.per_layer_model_projection, "per_layer_model_projection.weight", {L * P, H}, QuantRule::Keep);
    s.f32(w.per_layer_projection_norm, "per_layer_projection_norm.weight", {P});
  }
  w.layers.resize(size_t(L));
  for (const LayerSpec& spec : t.layers) {
    TextLayerWeights& lw = w.layers[size_t(spec.index)];
    const WeightScope ls = s.at(cat("layers.", spec.index, "."), spec.index);
    const int64_t d = spec.head_dim, kv = spec.num_key_value_heads, I = spec.intermediate_size;
    ls.f32(lw.input_layernorm, "input_layernorm.weight", {H});
    ls.f32(lw.post_attention_layernorm, "post_attention_layernorm.weight", {H});
    ls.f32(lw.pre_feedforward_layernorm, "pre_feedforward_layernorm.weight", {H});
    ls.f32(lw.post_feedforward_layernorm, "post_feedforward_layernorm.weight", {H});
    ls.scalar(lw.layer_scalar, "layer_scalar", {1});
    ls.linear(lw.q_proj, "self_attn.q_proj.weight", {nh * d, H}, QuantRule::Matrix);
    ls.f32(lw.q_norm, "self_attn.q_norm.weight", {d});
    ls.linear(lw.o_proj, "self_attn.o_proj.weight", {H, nh * d}, QuantRule::Matrix);
    if (spec.reuses_kv()) {
      // Reuse layers read another layer's cache: their own k/v weights, if saved, are never used.
      ls.ignored("self_attn.k_proj.weight", {kv * d, H});
      ls.ignored("self_attn.k_norm.weight", {d});
      if (spec.has_v_proj) ls.ignored("self_attn.v_proj.weight", {kv * d, H});
    } else {
      ls.linear(lw.k_proj, "self_attn.k_proj.weight", {kv * d, H}, QuantRule::Matrix);
      ls.f32(lw.k_norm, "self_attn.k_norm.weight", {d});
      if (spec.has_v_proj) ls.linear(lw.v_proj, "self_attn.v_proj.weight", {kv * d, H}, QuantRule::Matrix);
    }
    ls.linear(lw.gate_proj, "mlp.gate_proj.weight", {I, H}, QuantRule::Matrix);
    ls.linear(lw.up_proj, "mlp.up_proj.weight", {I, H}, QuantRule::Matrix);
    ls.linear(lw.down_proj, "mlp.down_proj.weight", {H, I}, QuantRule::Matrix);
    if (t.has_ple()) {
      ls.linear(lw.per_layer_input_gate, "per_layer_input_gate.weight", {P, H}, QuantRule::Keep);
      ls.linear(lw.per_layer_projection, "per_layer_projection.weight", {H, P}, QuantRule::Keep);
      ls.f32(lw.post_per_layer_input_norm, "post_per_layer_input_norm.weight", {H});
    }
    if (t.enable_moe_block) {
      const int64_t E = t.num_experts, Im = t.moe_intermediate_size;
      ls.linear(lw.router_proj, "router.proj.weight", {E, H}, QuantRule::Keep);
      ls.f32(lw.router_scale, "router.scale", {H});
      ls.f32(lw.router_per_expert_scale, "router.per_expert_scale", {E});
      // MLX (mlx-vlm / mlx-lm) stores the experts as switch_glu.{gate,up,down}_proj.weight, gate and up apart.
      ls.linear(lw.experts_gate_up_proj, "experts.gate_up_proj", {E, 2 * Im, H}, QuantRule::Matrix, {},
                {"experts.switch_glu.gate_proj.weight", "experts.switch_glu.up_proj.weight"}, &lw.experts_up_proj);
      ls.linear(lw.experts_down_proj, "experts.down_proj", {E, H, Im}, QuantRule::Matrix, {"experts.switch_glu.down_proj.weight"});
      ls.f32(lw.pre_feedforward_layernorm_2, "pre_feedforward_layernorm_2.weight", {H});
      ls.f32(lw.post_feedforward_layernorm_1, "post_feedforward_layernorm_1.weight", {H});
      ls.f32(lw.post_feedforward_layernorm_2, "post_feedforward_layernorm_2.weight", {H});
    }
  }
}

TextDecoder::TextDecoder(const TextConfig& cfg, TextWeights weights, TextSettings settings, Exec exec)
    : cfg_(cfg), w_(std::move(weights)), settings_(std::move(settings)), ex_(exec) {
  if (settings_.max_chunk < 1) throw InputError(cat("text decoder: max_chunk must be >= 1, got ", settings_.max_chunk));
  for (const LayerSpec& lc : cfg_.layers) {
    // Sliding layers: default rope over the whole head; full layers: proportional (zeros past n_rot).
    const bool prop = lc.rope.rope_type == "proportional";
    const double theta = lc.rope.rope_theta * (mutation("full_rope_theta_x1.01") && !lc.is_sliding() ? 1.01 : 1.0);
    std::vector<float> inv = ops::rope_inv_freq(prop ? ops::RopeKind::Proportional : ops::RopeKind::Default, lc.head_dim,
                                                theta, prop ? lc.rope.partial_rotary_factor : 1.0);
    Tensor t = Tensor::empty(DType::F32, {int64_t(inv.size())});
    std::memcpy(t.data(), inv.data(), inv.size() * sizeof(float));
    inv_freq_.push_back(t);
  }
  kv_shared_tail_ = cfg_.num_hidden_layers;
  while (kv_shared_tail_ > 0 && cfg_.layers[size_t(kv_shared_tail_ - 1)].reuses_kv()) --kv_shared_tail_;
  if (cfg_.enable_moe_block) {
    moe_row_token_ = Tensor::empty(DType::I32, {kMoeGatheredRows});
    for (int64_t r = 0; r < kMoeGatheredRows; ++r) moe_row_token_.data_as<int32_t>()[r] = int32_t(r / cfg_.top_k_experts);
    moe_zeros_ = Tensor::zeros(DType::F32, {kMoeGatheredRows, cfg_.hidden_size});
  }
}

std::unique_ptr<DecoderState> TextDecoder::new_state(int64_t max_context) const {
  auto st = std::make_unique<DecoderState>();
  st->ex = ex_;
  st->caches.resize(cfg_.layers.size());
  for (const LayerSpec& lc : cfg_.layers) {
    if (lc.reuses_kv()) continue;
    st->caches[size_t(lc.index)] = runtime::LayerKvCache(lc.num_key_value_heads, lc.head_dim,
                                                         lc.is_sliding() ? cfg_.sliding_window : 0,
                                                         settings_.max_chunk, max_context);
  }
  st->chunk_capacity = session_chunk(max_context);
  st->arena_storage = std::make_unique<Arena>(session_arena_bytes(max_context));
  st->arena = st->arena_storage.get();
  return st;
}

int64_t TextDecoder::session_chunk(int64_t max_context) const {
  // No chunk is longer than the context; rounded up to a power of two, so sessions of many different
  // lengths share a few measured sizes. (The caches' rings are sized for max_chunk: they exist only when
  // the context is longer than that.)
  const int64_t longest = std::clamp<int64_t>(max_context, 1, settings_.max_chunk);
  return std::min(settings_.max_chunk, int64_t(std::bit_ceil(uint64_t(longest))));
}

size_t TextDecoder::session_arena_bytes(int64_t max_context) const {
  const int64_t chunk = session_chunk(max_context);
  // The largest of a full chunk and a decode step; with experts, also the longest chunk that still takes
  // the gathered path (the MoE paths differ by size).
  size_t bytes = std::max(measure_arena(chunk), measure_arena(1));
  if (cfg_.enable_moe_block) bytes = std::max(bytes, measure_arena(std::min(chunk, kMoeGatheredRows / cfg_.top_k_experts)));
  return bytes;
}

size_t TextDecoder::batch_arena_bytes(int64_t rows) const {
  return measure_arena(std::clamp<int64_t>(rows, 1, settings_.max_chunk));
}

void TextDecoder::reserve_arena(DecoderState& st, size_t bytes) const {
  if (bytes <= st.arena->capacity()) return;
  st.arena_storage = std::make_unique<Arena>(bytes);
  st.arena = st.arena_storage.get();
}

void TextDecoder::reserve_chunk(DecoderState& st, int64_t T) const {
  if (T <= st.chunk_capacity) return;
  for (auto& c : st.caches) c.reserve_chunk(T);
  reserve_arena(st, measure_arena(T));
  st.chunk_capacity = T;
}

size_t TextDecoder::measure_arena(int64_t T) const {
  {
    std::lock_guard<std::mutex> lock(measured_mu_);
    auto it = measured_.find(T);
    if (it != measured_.end()) return it->second;
  }
  const size_t bytes = runtime::measure_arena_bytes([&](Arena& activations, Arena& outputs) {
    DecoderState m;
    m.ex = runtime::measure_exec();
    m.caches.resize(cfg_.layers.size());
    for (const LayerSpec& lc : cfg_.layers)
      if (!lc.reuses_kv()) m.caches[size_t(lc.index)] = runtime::LayerKvCache::phantom(lc.num_key_value_heads, lc.head_dim);
    m.arena = &activations;
    Tensor logits = outputs.tensor(DType::F32, {T, cfg_.vocab_size});
    std::vector<int32_t> ids(size_t(T), 0), blocks(size_t(T), 0);  // blocks: the path with block ids
    const RowSegment seg{&m, 0, T};
    forward_chunk(m, {&seg, 1}, nullptr, ids.data(), blocks.data(), T, true, logits);
  });
  std::lock_guard<std::mutex> lock(measured_mu_);
  measured_.emplace(T, bytes);
  return bytes;
}

void TextDecoder::llm_ids(const int32_t* ids, int64_t T, int32_t* out) const {
  const int32_t pad = int32_t(cfg_.pad_token_id);
  for (int64_t t = 0; t < T; ++t) {
    int32_t id = ids[t];
    for (int32_t p : settings_.placeholder_ids)
      if (id == p) id = pad;
    out[t] = id;
  }
}

void TextDecoder::embed(const int32_t* ids, int64_t T, Tensor& out) const {
  if (T < 1) throw InputError("embed: no tokens");
  // Small host buffer for the mapped ids: the embedding op reads them on the backend.
  Tensor llm = Tensor::empty(DType::I32, {T});
  llm_ids(ids, T, llm.data_as<int32_t>());
  ops::CommandScope scope(ex_);
  ops::embedding(w_.embed_tokens, llm, out, settings_.embed_scale, ex_);
  scope.finish();
}

bool TextDecoder::layer_uses_blocks(const LayerSpec& lc) const {
  if (cfg_.use_bidirectional_attention != "vision") return false;
  // Gemma 4 (26B/31B): sliding layers only; unified 12B: every layer, the block overriding the window.
  return cfg_.model_type == "gemma4_unified_text" || lc.is_sliding();
}

void TextDecoder::forward(DecoderState& st, const int32_t* ids, int64_t T, bool all_logits, Tensor& logits) const {
  forward_embeds(st, Tensor(), ids, nullptr, T, all_logits, logits);
}

void TextDecoder::forward_embeds(DecoderState& st, const Tensor& x, const int32_t* ids, const int32_t* block_ids,
                                 int64_t T, bool all_logits, Tensor& logits) const {
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  if (T < 1) throw InputError("forward: no tokens");
  if (x.defined() && (x.dtype() != DType::F32 || x.shape() != Shape{T, H} || !x.is_contiguous()))
    throw InputError(cat("forward_embeds: embeddings must be f32 [", T, ", ", H, "] contiguous, got ", x.describe()));
  const Shape want{all_logits ? T : 1, V};
  if (logits.shape() != want || logits.dtype() != DType::F32)
    throw InputError(cat("forward: logits buffer must be f32 ", shape_str(want), ", got ", logits.describe()));
  // Session-wide block ids: local ids of this call shifted past every block already in the cache.
  std::vector<int32_t> blocks;
  if (block_ids) {
    int32_t local_max = -1;
    blocks.resize(size_t(T));
    for (int64_t t = 0; t < T; ++t) {
      blocks[size_t(t)] = block_ids[t] < 0 ? -1 : block_ids[t] + st.next_block;
      local_max = std::max(local_max, block_ids[t]);
    }
    st.next_block += local_max + 1;
  }
  for (int64_t s = 0; s < T;) {
    int64_t e = std::min(s + settings_.max_chunk, T);
    // Never split a bidirectional block: end before it, or (a block longer than a chunk) after it.
    if (!blocks.empty() && e < T && blocks[size_t(e)] >= 0 && blocks[size_t(e)] == blocks[size_t(e - 1)]) {
      int64_t start = e - 1;
      while (start > s && blocks[size_t(start - 1)] == blocks[size_t(e)]) --start;
      if (start > s) {
        e = start;
      } else {
        while (e < T && blocks[size_t(e)] == blocks[size_t(s)]) ++e;
      }
    }
    const int64_t n = e - s;
    reserve_chunk(st, n);
    const bool last = e == T;
    Tensor rows = all_logits ? logits.slice(0, s, e) : logits;
    Tensor xs = x.defined() ? x.slice(0, s, e) : Tensor();
    Tensor none;  // an inner chunk of a last-token-only prefill computes no logits
    const RowSegment seg{&st, 0, n};
    forward_chunk(st, {&seg, 1}, x.defined() ? &xs : nullptr, ids + s, blocks.empty() ? nullptr : blocks.data() + s,
                  n, all_logits, all_logits || last ? rows : none);
    s = e;
  }
}

void TextDecoder::forward_batch(std::span<DecoderState* const> states, const int32_t* ids, Tensor& logits) const {
  const int64_t B = int64_t(states.size()), V = cfg_.vocab_size;
  if (B < 1) throw InputError("forward_batch: no sequences");
  if (logits.shape() != Shape{B, V} || logits.dtype() != DType::F32)
    throw InputError(cat("forward_batch: logits buffer must be f32 [", B, ", ", V, "], got ", logits.describe()));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < b; ++c)
      if (states[size_t(b)] == states[size_t(c)])
        throw InputError(cat("forward_batch: sequences ", c, " and ", b, " are the same session"));
  // Groups of at most max_chunk rows, each through the arena of its first sequence. Every linear of the step
  // runs row-invariant (Exec::row_invariant): a sequence's logits are the same bit for bit whatever shares
  // its step, as if it had decoded alone.
  thread_local std::vector<RowSegment> segs;  // reused: no heap allocation per batched step once warm
  for (int64_t s = 0; s < B; s += settings_.max_chunk) {
    const int64_t n = std::min(settings_.max_chunk, B - s);
    segs.clear();
    for (int64_t b = 0; b < n; ++b) segs.push_back({states[size_t(s + b)], b, 1});
    DecoderState& work = *states[size_t(s)];
    reserve_arena(work, batch_arena_bytes(n));  // one row per sequence: the caches take chunks of 1
    Tensor rows = logits.slice(0, s, s + n);
    struct RowInvariant {  // the flag for this step only, however it ends
      Exec& ex;
      const bool was = ex.row_invariant;
      explicit RowInvariant(Exec& e) : ex(e) { ex.row_invariant = true; }
      ~RowInvariant() { ex.row_invariant = was; }
    } row_invariant(work.ex);
    forward_chunk(work, segs, nullptr, ids + s, nullptr, n, true, rows);
  }
}

void TextDecoder::forward_chunk(DecoderState& st, std::span<const RowSegment> segs, const Tensor* x_rows,
                                const int32_t* ids_ptr, const int32_t* blocks_ptr, int64_t T, bool all_logits,
                                Tensor& logits_rows) const {
  // One command buffer for the chunk (plus one per MoE layer, see moe_block): ops only encode.
  // The host writes ids, positions and blocks below before any op of this chunk is encoded.
  ops::CommandScope scope(st.ex);
  Arena& A = *st.arena;
  A.reset();
  const int64_t H = cfg_.hidden_size, L = cfg_.num_hidden_layers, P = cfg_.hidden_size_per_layer_input;
  Tensor ids = A.tensor(DType::I32, {T});
  llm_ids(ids_ptr, T, ids.data_as<int32_t>());
  Tensor positions = A.tensor(DType::I32, {T});
  for (const RowSegment& seg : segs)
    for (int64_t i = 0; i < seg.n; ++i) positions.data_as<int32_t>()[seg.row + i] = int32_t(seg.state->position + i);
  Tensor blocks;
  if (blocks_ptr) {
    blocks = A.tensor(DType::I32, {T});
    std::memcpy(blocks.data(), blocks_ptr, size_t(T) * sizeof(int32_t));
  }

  // h0 = E[ids] · sqrt(H) (scale rounded to the table's dtype), or the caller's embeddings
  Tensor x = A.tensor(DType::F32, {T, H});
  if (x_rows) ops::copy(*x_rows, x, st.ex);
  else ops::embedding(w_.embed_tokens, ids, x, settings_.embed_scale, st.ex);
  name_intermediate(x, "inp_embd", -1);

  // PLE (spec §2.3): ple = (RMSNorm((h0·Wᵀ)·H^-0.5 per layer slice) + E_ple[ids]·sqrt(P)) · 2^-0.5,
  // h0 being the merged embeddings (soft tokens included), ids with placeholders looked up as pad.
  Tensor ple;
  if (P > 0) {
    Tensor tok = A.tensor(DType::F32, {T, L * P});
    ops::embedding(w_.embed_tokens_per_layer, ids, tok, settings_.ple_embed_scale, st.ex);
    ple = A.tensor(DType::F32, {T, L * P});
    ops::linear(x, w_.per_layer_model_projection, nullptr, ple, st.ex);
    ops::unary(ple, ple, {ops::UnaryKind::Scale, float(1.0 / std::sqrt(double(H)))}, st.ex);
    Tensor rows = ple.reshape({T * L, P});
    ops::rms_norm(rows, w_.per_layer_projection_norm, float(cfg_.rms_norm_eps), rows, st.ex);
    ops::binary(ple, tok, ple, ops::BinaryKind::Add, st.ex);
    ops::unary(ple, ple, {ops::UnaryKind::Scale, float(std::pow(2.0, -0.5))}, st.ex);
    name_intermediate(ple, "per_layer_inputs", -1);
  }
  const size_t layer_mark = A.mark();

  // KV-shared prefill shortcut (spec §2.6): the trailing layers that reuse earlier layers' K/V add nothing
  // to any cache, so their rows matter only where logits are read. Without all_logits they run for the
  // last row alone (or not at all in an inner chunk that computes no logits).
  // (A batched step asks for every row's logits: each row is some sequence's last.)
  const int64_t shortcut_from = all_logits ? L : kv_shared_tail_;
  int64_t rows = T;  // rows the layers still carry
  std::span<const RowSegment> cur = segs;  // (no heap: a decode step allocates nothing)
  RowSegment last_row{};
  for (int64_t l = 0; l < L; ++l) {
    if (l == shortcut_from && rows > 1) {
      if (!logits_rows.defined()) break;
      x = x.slice(0, rows - 1, rows);
      positions = positions.slice(0, rows - 1, rows);
      if (blocks.defined()) blocks = blocks.slice(0, rows - 1, rows);
      if (P > 0) ple = ple.slice(0, rows - 1, rows);
      rows = 1;
      last_row = {cur.back().state, 0, 1};  // one segment here (all_logits is off)
      cur = {&last_row, 1};
    }
    A.reset(layer_mark);
    const int64_t T = rows;
    const TextLayerWeights& lw = w_.layers[size_t(l)];
    attention_block(st, cur, l, x, positions, blocks.defined() ? &blocks : nullptr, T);
    feed_forward_block(st, l, x, T);
    if (P > 0) {
      // x += RMSNorm(proj(gelu(gate(x)) · ple[:, l]))
      Tensor g = A.tensor(DType::F32, {T, P});
      ops::linear(x, lw.per_layer_input_gate, nullptr, g, st.ex);
      Tensor ple_l = A.tensor(DType::F32, {T, P});
      ops::copy(ple.reshape({T, L, P}).select(1, l), ple_l, st.ex);  // this layer's [T, P] slice
      gelu_gate(st.ex, g, ple_l);
      Tensor y = A.tensor(DType::F32, {T, H});
      ops::linear(g, lw.per_layer_projection, nullptr, y, st.ex);
      ops::rms_norm(y, lw.post_per_layer_input_norm, float(cfg_.rms_norm_eps), y, st.ex);
      name_intermediate(y, "ple_out", l);
      ops::binary(x, y, x, ops::BinaryKind::Add, st.ex);
    }
    ops::unary(x, x, {ops::UnaryKind::Scale, lw.layer_scalar}, st.ex);
    name_intermediate(x, "l_out", l);
  }
  for (const RowSegment& seg : segs) seg.state->position += seg.n;

  if (logits_rows.defined()) {
    A.reset(layer_mark);
    Tensor last = all_logits ? x : x.slice(0, x.size(0) - 1, x.size(0));
    const int64_t R = last.size(0);
    Tensor normed = A.tensor(DType::F32, {R, H});
    ops::rms_norm(last, w_.norm, float(cfg_.rms_norm_eps), normed, st.ex);
    name_intermediate(normed, "result_norm", -1);
    ops::linear(normed, w_.embed_tokens, nullptr, logits_rows, st.ex);  // tied LM head
    if (cfg_.final_logit_softcapping)
      ops::unary(logits_rows, logits_rows,
                 {ops::UnaryKind::Softcap, float(*cfg_.final_logit_softcapping) * (mutation("softcap_x1.01") ? 1.01f : 1.f)},
                 st.ex);
    name_intermediate(logits_rows, "result_output", -1);
  }
  scope.finish();
}

void TextDecoder::attention_block(DecoderState& st, std::span<const RowSegment> segs, int64_t l, Tensor& x,
                                  const Tensor& positions, const Tensor* blocks, int64_t T) const {
  Arena& A = *st.arena;
  const LayerSpec& lc = cfg_.layers[size_t(l)];
  const TextLayerWeights& lw = w_.layers[size_t(l)];
  const int64_t H = cfg_.hidden_size, nh = cfg_.num_attention_heads, d = lc.head_dim, kv = lc.num_key_value_heads;
  const float eps = float(cfg_.rms_norm_eps);
  const Tensor& inv_freq = inv_freq_[size_t(l)];

  Tensor h = A.tensor(DType::F32, {T, H});
  ops::rms_norm(x, lw.input_layernorm, eps, h, st.ex);
  name_intermediate(h, "attn_norm", l);

  // q: [T, nh, d], normed per head then rotated
  Tensor q = A.tensor(DType::F32, {T, nh, d});
  Tensor q_flat = q.reshape({T, nh * d});
  ops::linear(h, lw.q_proj, nullptr, q_flat, st.ex);
  ops::rms_norm(q, lw.q_norm, eps, q, st.ex);
  ops::rope(q, positions, inv_freq, q, st.ex);
  name_intermediate(q, "q", l);

  if (!lc.reuses_kv()) {
    // k: [T, kv, d] = rope(RMSNorm(h·Wkᵀ; k_norm)); v = RMSNorm(h·Wvᵀ) without weight, or of raw k (k=v).
    Tensor k = A.tensor(DType::F32, {T, kv, d});
    Tensor k_flat = k.reshape({T, kv * d});
    ops::linear(h, lw.k_proj, nullptr, k_flat, st.ex);
    Tensor v = A.tensor(DType::F32, {T, kv, d});
    if (lc.has_v_proj) {
      Tensor v_flat = v.reshape({T, kv * d});
      ops::linear(h, lw.v_proj, nullptr, v_flat, st.ex);
    } else {
      ops::copy(k, v, st.ex);  // k=v layers: V is the raw k projection (normed below, never rotated)
    }
    ops::rms_norm(v, Tensor(), eps, v, st.ex);
    ops::rms_norm(k, lw.k_norm, eps, k, st.ex);
    ops::rope(k, positions, inv_freq, k, st.ex);
    name_intermediate(k, "k", l);
    name_intermediate(v, "v", l);
    for (const RowSegment& seg : segs)  // each sequence's rows into its own cache
      seg.state->caches[size_t(l)].append(k.slice(0, seg.row, seg.row + seg.n), v.slice(0, seg.row, seg.row + seg.n),
                                          seg.state->position,
                                          blocks ? blocks->data_as<const int32_t>() + seg.row : nullptr, st.ex);
  }
  ops::AttentionParams ap;
  ap.scale = 1.0f;
  ap.causal = true;
  ap.window = lc.is_sliding() ? cfg_.sliding_window - (mutation("sliding_window_minus_1") ? 1 : 0) : 0;
  const bool use_blocks = blocks && layer_uses_blocks(lc);
  ap.block_overrides_window = cfg_.model_type == "gemma4_unified_text";
  Tensor attn = A.tensor(DType::F32, {T, nh, d});
  for (const RowSegment& seg : segs) {
    // Reuse layers read the store layer's post-update cache (same positions, same mask).
    const runtime::LayerKvCache& cache = seg.state->caches[size_t(lc.kv_source)];
    const Tensor k_blocks = use_blocks ? cache.blocks() : Tensor();
    const int64_t r0 = seg.row, r1 = seg.row + seg.n;
    const Tensor q_blocks = use_blocks ? blocks->slice(0, r0, r1) : Tensor();
    Tensor out = attn.slice(0, r0, r1);
    ops::attention(q.slice(0, r0, r1), cache.keys(), cache.values(), positions.slice(0, r0, r1), cache.positions(),
                   use_blocks ? &q_blocks : nullptr, use_blocks ? &k_blocks : nullptr, out, ap, st.ex);
  }
  name_intermediate(attn, "kqv_out", l);

  Tensor o = A.tensor(DType::F32, {T, H});
  ops::linear(attn.reshape({T, nh * d}), lw.o_proj, nullptr, o, st.ex);
  ops::rms_norm(o, lw.post_attention_layernorm, eps, o, st.ex);
  name_intermediate(o, "attn_out", l);
  ops::binary(x, o, x, ops::BinaryKind::Add, st.ex);
}

void TextDecoder::feed_forward_block(DecoderState& st, int64_t l, Tensor& x, int64_t T) const {
  Arena& A = *st.arena;
  const LayerSpec& lc = cfg_.layers[size_t(l)];
  const TextLayerWeights& lw = w_.layers[size_t(l)];
  const int64_t H = cfg_.hidden_size, I = lc.intermediate_size;
  const float eps = float(cfg_.rms_norm_eps);

  Tensor h = A.tensor(DType::F32, {T, H});
  ops::rms_norm(x, lw.pre_feedforward_layernorm, eps, h, st.ex);
  name_intermediate(h, "ffn_norm", l);
  // m = down(gelu_tanh(gate(h)) · up(h))
  Tensor g = A.tensor(DType::F32, {T, I});
  Tensor u = A.tensor(DType::F32, {T, I});
  ops::linear(h, lw.gate_proj, nullptr, g, st.ex);
  ops::linear(h, lw.up_proj, nullptr, u, st.ex);
  gelu_gate(st.ex, g, u);
  name_intermediate(g, "ffn_act", l);
  Tensor m = A.tensor(DType::F32, {T, H});
  ops::linear(g, lw.down_proj, nullptr, m, st.ex);
  name_intermediate(m, "ffn_mlp", l);
  if (cfg_.enable_moe_block) moe_block(st, l, x, m, T);
  ops::rms_norm(m, lw.post_feedforward_layernorm, eps, m, st.ex);
  name_intermediate(m, "ffn_out", l);
  ops::binary(x, m, x, ops::BinaryKind::Add, st.ex);
}

// m ← RMSNorm(m; post_ff_ln1) + RMSNorm(Σ_j w_j · expert_j(RMSNorm(r; pre_ff_ln2)); post_ff_ln2), spec §2.8.
void TextDecoder::moe_block(DecoderState& st, int64_t l, const Tensor& r, Tensor& m, int64_t T) const {
  Arena& A = *st.arena;
  const TextLayerWeights& lw = w_.layers[size_t(l)];
  const int64_t H = cfg_.hidden_size, E = cfg_.num_experts, K = cfg_.top_k_experts;
  const float eps = float(cfg_.rms_norm_eps);

  ops::rms_norm(m, lw.post_feedforward_layernorm_1, eps, m, st.ex);

  // Router on the residual stream: probs = softmax((RMSNorm(r) · scale · H^-0.5) · W_routerᵀ) in f32.
  Tensor z = A.tensor(DType::F32, {T, H});
  ops::rms_norm(r, Tensor(), eps, z, st.ex);
  ops::binary(z, lw.router_scale, z, ops::BinaryKind::Mul, st.ex);
  ops::unary(z, z, {ops::UnaryKind::Scale, float(std::pow(double(H), -0.5))}, st.ex);
  Tensor scores = A.tensor(DType::F32, {T, E});
  // The router picks experts: f32 products (never bf16_products), so no rounding of z flips a choice.
  Exec router_ex = st.ex;
  router_ex.bf16_products = false;
  ops::linear(z, lw.router_proj, nullptr, scores, router_ex);
  Tensor top_w = A.tensor(DType::F32, {T, K});
  Tensor top_i = A.tensor(DType::I32, {T, K});
  if (mutation("moe_softmax_after_topk")) {  // top-k of the raw scores, softmax over the k picked
    ops::topk(scores, K, top_w, top_i, st.ex);
    ops::softmax(top_w, top_w, st.ex);
  } else {
    ops::softmax(scores, scores, st.ex);
    name_intermediate(scores, "ffn_moe_probs", l);
    ops::topk(scores, K, top_w, top_i, st.ex);
  }
  // Renormalise the top-k to sum 1, fold in the learned per-expert scale; rows ordered by expert id.
  ops::route_weights(top_w, top_i, lw.router_per_expert_scale, top_w, top_i, st.ex);

  Tensor e_in = A.tensor(DType::F32, {T, H});
  ops::rms_norm(r, lw.pre_feedforward_layernorm_2, eps, e_in, st.ex);
  Tensor acc = A.tensor(DType::F32, {T, H});
  if (T * K <= kMoeGatheredRows) moe_experts_gathered(st, lw, e_in, top_w, top_i, acc, T);
  else moe_experts_grouped(st, lw, e_in, top_w, top_i, acc, T);
  ops::rms_norm(acc, lw.post_feedforward_layernorm_2, eps, acc, st.ex);
  name_intermediate(acc, "ffn_moe_out", l);
  ops::binary(m, acc, m, ops::BinaryKind::Add, st.ex);
}

// g ← gelu_tanh(g) · u, the gated activation (dense and expert MLPs, the per-layer input gate).
void TextDecoder::gelu_gate(const Exec& ex, Tensor& g, const Tensor& u) const {
  ops::unary(g, g, {ops::UnaryKind::GeluTanh}, ex);
  ops::binary(g, u, g, ops::BinaryKind::Mul, ex);
}

void TextDecoder::moe_experts_gathered(DecoderState& st, const TextLayerWeights& lw, const Tensor& e_in,
                                       const Tensor& top_w, const Tensor& top_i, Tensor& acc, int64_t T) const {
  Arena& A = *st.arena;
  const int64_t H = cfg_.hidden_size, K = cfg_.top_k_experts, I = cfg_.moe_intermediate_size, R = T * K;
  const Tensor row_token = moe_row_token_.slice(0, 0, R);  // row r = t·K + j is token t's j-th expert
  const Tensor expert_of_row = top_i.reshape({R}), weight_of_row = top_w.reshape({R});
  Tensor rows_in = A.tensor(DType::F32, {R, H});
  ops::embedding(e_in, row_token, rows_in, 1.0f, st.ex);  // each token's row once per chosen expert
  Tensor a = A.tensor(DType::F32, {R, I}), up = A.tensor(DType::F32, {R, I});
  if (lw.experts_up_proj.defined()) {  // gate and up stored apart (MLX)
    ops::linear_gathered(rows_in, lw.experts_gate_up_proj, expert_of_row, a, st.ex);
    ops::linear_gathered(rows_in, lw.experts_up_proj, expert_of_row, up, st.ex);
  } else {
    Tensor gu = A.tensor(DType::F32, {R, 2 * I});
    ops::linear_gathered(rows_in, lw.experts_gate_up_proj, expert_of_row, gu, st.ex);
    // [gate | up] = gu split along the last dim
    ops::copy(gu.slice(1, 0, I), a, st.ex);
    ops::copy(gu.slice(1, I, 2 * I), up, st.ex);
  }
  gelu_gate(st.ex, a, up);  // a = gelu_tanh(gate) · up
  Tensor out = A.tensor(DType::F32, {R, H});
  ops::linear_gathered(a, lw.experts_down_proj, expert_of_row, out, st.ex);
  // acc[t] = Σ_j w · out over token t's rows, j in increasing expert id (route_weights sorted them).
  ops::copy(moe_zeros_.slice(0, 0, T), acc, st.ex);
  ops::index_add(acc, row_token, out, &weight_of_row, st.ex);
}

void TextDecoder::moe_experts_grouped(DecoderState& st, const TextLayerWeights& lw, const Tensor& e_in,
                                      const Tensor& top_w, const Tensor& top_i, Tensor& acc, int64_t T) const {
  Arena& A = *st.arena;
  const int64_t H = cfg_.hidden_size, E = cfg_.num_experts, K = cfg_.top_k_experts, I = cfg_.moe_intermediate_size;
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
  ops::synchronize(st.ex);
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
    // A token picks an expert at most once, so an expert has at most T rows; slices of T keep the buffers
    // in bounds whatever the routing holds (a measuring pass routes every row to expert 0).
    for (int64_t s0 = expert_start[size_t(e)]; s0 < expert_start[size_t(e) + 1]; s0 += T) {
      const int64_t n = std::min(T, expert_start[size_t(e) + 1] - s0);
      Tensor in = rows_in.slice(0, 0, n), g2 = gu.slice(0, 0, n), a = act.slice(0, 0, n), out = rows_out.slice(0, 0, n);
      Tensor up = up_rows.slice(0, 0, n), idx = tok_ids.slice(0, s0, s0 + n), wts = tok_w.slice(0, s0, s0 + n);
      ops::embedding(e_in, idx, in, 1.0f, st.ex);  // gather the routed tokens' rows: [n, H]
      if (lw.experts_up_proj.defined()) {  // gate and up stored apart (MLX)
        ops::linear(in, lw.experts_gate_up_proj.expert(e), nullptr, a, st.ex);
        ops::linear(in, lw.experts_up_proj.expert(e), nullptr, up, st.ex);
      } else {
        ops::linear(in, lw.experts_gate_up_proj.expert(e), nullptr, g2, st.ex);
        // [gate | up] = g2 split along the last dim
        ops::copy(g2.slice(1, 0, I), a, st.ex);
        ops::copy(g2.slice(1, I, 2 * I), up, st.ex);
      }
      gelu_gate(st.ex, a, up);  // a = gelu_tanh(gate) · up
      ops::linear(a, lw.experts_down_proj.expert(e), nullptr, out, st.ex);
      ops::index_add(acc, idx, out, &wts, st.ex);  // acc[tok] += w · out, in token order
    }
  }
}

}  // namespace mb::gemma4
