// Gemma 4 text decoder (spec §2): embeddings, PLE, sliding/full attention with per-layer head dims,
// KV sharing, dense MLP, MoE, layer_scalar, final norm, tied logits, softcap. f32 activations;
// weights f32, bf16 or f16 (read in place from the mapped checkpoint). Calls ops only.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"
#include "models/gemma4/text_config.h"
#include "ops/exec.h"
#include "runtime/kv_cache.h"

namespace mb::gemma4 {

struct LayerWeights {
  Tensor input_ln, post_attn_ln, pre_ff_ln, post_ff_ln;  // [H] f32
  float layer_scalar = 1.f;
  Tensor q_proj, q_norm, k_proj, k_norm, v_proj, o_proj;  // norms [d] f32
  Tensor gate, up, down;
  Tensor ple_gate, ple_proj, ple_post_ln;                  // PLE models
  Tensor router_proj, router_scale, per_expert_scale;      // MoE models (scales f32)
  Tensor experts_gate_up, experts_down;                    // [E, 2I, H], [E, H, I]
  Tensor pre_ff_ln2, post_ff_ln1, post_ff_ln2;
  std::vector<float> inv_freq;                             // rope table of this layer
  Tensor inv_freq_t;                                       // same, as a [n] f32 tensor
};

// A session's mutable state: one cache per layer that owns one (reuse layers have none).
struct DecoderState {
  std::vector<runtime::LayerKvCache> caches;  // indexed by layer (empty for reuse layers)
  int64_t position = 0;
  std::unique_ptr<Arena> arena;
};

class TextModel {
 public:
  // `weights` maps names relative to the text prefix ("layers.3.self_attn.q_proj.weight") to tensors.
  TextModel(TextConfig cfg, const std::map<std::string, Tensor>& weights, Exec exec);

  const TextConfig& config() const { return cfg_; }
  std::unique_ptr<DecoderState> new_state(int64_t max_context) const;

  // Runs ids (T tokens) at positions state.position … + T − 1, appending to the caches.
  // Returns logits [T, V] (all_logits) or [1, V] for the last token, f32, softcapped.
  Tensor forward(DecoderState& state, const std::vector<int32_t>& ids, bool all_logits) const;

 private:
  Tensor forward_chunk(DecoderState& state, const int32_t* ids, int64_t T, bool all_logits) const;
  void attention_block(DecoderState& state, int64_t l, Tensor& x, const Tensor& positions, int64_t T) const;
  void feed_forward_block(DecoderState& state, int64_t l, Tensor& x, int64_t T) const;
  void gelu_gate(Tensor& g, const Tensor& u) const;
  void moe_block(DecoderState& state, int64_t l, const Tensor& residual, Tensor& m, int64_t T) const;
  // acc [T, H] = Σ_j w[t, j] · expert_{ids[t, j]}(e_in[t]), experts added per token in increasing id.
  // Gathered: every (token, slot) row through its expert on the device, no host sync (decode-sized T).
  void moe_experts_gathered(DecoderState& state, const LayerWeights& lw, const Tensor& e_in, const Tensor& top_w,
                            const Tensor& top_i, Tensor& acc, int64_t T) const;
  // Grouped: the host reads the routing (one sync) and runs each expert once over its tokens (prefill).
  void moe_experts_grouped(DecoderState& state, const LayerWeights& lw, const Tensor& e_in, const Tensor& top_w,
                           const Tensor& top_i, Tensor& acc, int64_t T) const;
  size_t arena_bytes(int64_t T) const;

  TextConfig cfg_;
  Exec ex_;
  Tensor embed_tokens, final_norm;       // [V, H], [H]
  Tensor ple_table, ple_projection, ple_norm;  // [V, L·P], [L·P, H], [P]
  std::vector<LayerWeights> layers_;
  // MoE, gathered path (moe_experts_gathered, T·top_k <= kMoeGatheredRows): constants the host writes
  // once, so no host write lands in arena memory that queued dispatches may still use.
  static constexpr int64_t kMoeGatheredRows = 16;
  Tensor moe_row_token_;  // [kMoeGatheredRows] i32: row r = t·K + j belongs to token r / K
  Tensor moe_zeros_;      // [kMoeGatheredRows, H] f32 zeros (the accumulator's start)
};

}  // namespace mb::gemma4
