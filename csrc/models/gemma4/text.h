// Gemma 4 text decoder (spec §2): embeddings, PLE, sliding/full attention with per-layer head dims,
// KV sharing, dense MLP, MoE, layer_scalar, final norm, tied logits, softcap. f32 activations; weights
// f32, bf16 or f16 read in place from the mapped checkpoint. Calls ops only; never names a backend.
//
// Two entries: embed(ids) gives the scaled token embeddings [T, H] (placeholder ids embedded as pad), a
// caller may overwrite rows with soft tokens (image / audio / video), and forward_embeds(x, ids, ...) runs
// the layers. forward(ids) is both in one. ids are still needed by forward_embeds for the per-layer
// embeddings, where placeholders are also looked up as pad (spec §2.0, §2.3).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/arena.h"
#include "ops/exec.h"
#include "core/tensor.h"
#include "models/gemma4/config.h"
#include "models/gemma4/weights.h"
#include "ops/quant.h"
#include "runtime/kv_cache.h"

namespace mb::gemma4 {

// Matrices are ops::LinearWeight: read in place (f32 / bf16 / f16), or quantized (at load, or stored
// MLX-quantized); the decoder calls ops::linear / ops::embedding on them either way.
struct TextLayerWeights {
  Tensor input_layernorm, post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm;  // [H] f32
  float layer_scalar = 1.f;
  ops::LinearWeight q_proj, k_proj, v_proj, o_proj;                      // k/v absent in reuse layers
  Tensor q_norm, k_norm;                                                 // [d] f32
  ops::LinearWeight gate_proj, up_proj, down_proj;                       // dense MLP
  ops::LinearWeight per_layer_input_gate, per_layer_projection;          // PLE models
  Tensor post_per_layer_input_norm;
  ops::LinearWeight router_proj;                                         // MoE
  Tensor router_scale, router_per_expert_scale;                          // f32
  ops::LinearWeight experts_gate_up_proj, experts_down_proj;             // stacked [E, 2I, H], [E, H, I]
  // MLX checkpoints store gate and up apart: then experts_gate_up_proj holds gate [E, I, H] and this up.
  ops::LinearWeight experts_up_proj;
  Tensor pre_feedforward_layernorm_2, post_feedforward_layernorm_1, post_feedforward_layernorm_2;
};

struct TextWeights {
  ops::LinearWeight embed_tokens;                // [V, H], also the tied LM head
  Tensor norm;                                   // [H] f32, final norm
  ops::LinearWeight embed_tokens_per_layer;      // [V_ple, L·P]   PLE models (gathered: rows read from the file, core/file_map.h)
  ops::LinearWeight per_layer_model_projection;  // [L·P, H]
  Tensor per_layer_projection_norm;              // [P] f32
  std::vector<TextLayerWeights> layers;
};

// Names every text tensor (prefix "model.language_model." or "model." for text-only checkpoints).
void visit_weights(const TextConfig& cfg, TextWeights& w, const WeightScope& s);

// A session's decoder state: one cache per layer that owns one (reuse layers have none), the position,
// the bidirectional block counter, the activation arena, and the device its ops run on.
struct DecoderState {
  Exec ex;
  std::vector<runtime::LayerKvCache> caches;  // indexed by layer (empty for reuse layers)
  int64_t position = 0;
  int32_t next_block = 0;   // session-wide id of the next bidirectional block
  int64_t chunk_capacity = 0;  // the longest chunk the caches and arena are sized for
  Arena* arena = nullptr;               // the arena a forward allocates from: arena_storage's, or a measuring one
  std::unique_ptr<Arena> arena_storage;
};

// Rows [row, row + n) of a forward belong to `state`'s sequence, at its positions state->position + i.
struct RowSegment {
  DecoderState* state;
  int64_t row, n;
};

struct TextSettings {
  int64_t max_chunk = 256;       // prefill chunk (bounds activation memory)
  float embed_scale = 1.f;       // sqrt(H) rounded to the embedding table's dtype (spec §2.2)
  float ple_embed_scale = 1.f;   // sqrt(P) rounded to the PLE table's dtype
  std::vector<int32_t> placeholder_ids;  // image / video / audio soft-token ids: embedded as pad
};

class TextDecoder {
 public:
  TextDecoder(const TextConfig& cfg, TextWeights weights, TextSettings settings, Exec exec);

  const TextConfig& config() const { return cfg_; }
  const TextSettings& settings() const { return settings_; }
  const Exec& exec() const { return ex_; }
  // A state for a sequence of at most max_context tokens: its caches, and an arena of
  // session_arena_bytes(max_context).
  std::unique_ptr<DecoderState> new_state(int64_t max_context) const;
  // Grows the caches' chunk capacity and the arena so a chunk of T tokens fits (a bidirectional block is
  // never split across chunks, so a block longer than max_chunk makes a longer chunk).
  void reserve_chunk(DecoderState& state, int64_t T) const;
  // The activation arena a state of this max_context holds: sized for its longest chunk (max_chunk, or
  // the context rounded up to a power of two when shorter) and a decode step.
  size_t session_arena_bytes(int64_t max_context) const;
  // The arena a batched decode step of `rows` sequences runs through (forward_batch grows the first
  // sequence's arena to it; groups hold at most max_chunk rows).
  size_t batch_arena_bytes(int64_t rows) const;

  // ids [T] → out [T, H] f32: E[ids'] · embed_scale with placeholder ids replaced by pad.
  void embed(const int32_t* ids, int64_t T, Tensor& out) const;

  // Runs the layers on x [T, H] f32 (rows = embeddings, soft tokens in place of placeholders) for ids
  // [T] at positions state.position … + T − 1, appending to the caches. block_ids [T] (or null): tokens
  // sharing an id ≥ 0 form one bidirectional block (images / video frames on "vision" models), −1 none;
  // ids are local to this call. Writes logits [T, V] (all_logits) or [1, V] for the last token into
  // `logits`, f32, softcapped.
  void forward_embeds(DecoderState& state, const Tensor& x, const int32_t* ids, const int32_t* block_ids, int64_t T,
                      bool all_logits, Tensor& logits) const;
  // embed + forward_embeds.
  void forward(DecoderState& state, const int32_t* ids, int64_t T, bool all_logits, Tensor& logits) const;
  // One decode step of B sequences at once: ids[b] is the next token of states[b] (distinct states of this
  // decoder, each with its own cache and position); logits [B, V] f32. Each linear layer reads its weights
  // once for all rows; the cache appends and attention run per sequence. A row's result is the one a
  // single-sequence step gives up to the linear kernels' summation order (GEMV for ≤ 8 rows, GEMM beyond).
  void forward_batch(std::span<DecoderState* const> states, const int32_t* ids, Tensor& logits) const;

 private:
  // One chunk of T rows: x_rows [T, H] (copied into the arena) or ids embedded here when x_rows is null.
  // The rows belong to the sequences of `segs` (one for a prefill chunk, one per row for a batched step);
  // `work` supplies the arena and the device. Advances every segment's state by its rows.
  void forward_chunk(DecoderState& work, std::span<const RowSegment> segs, const Tensor* x_rows, const int32_t* ids,
                     const int32_t* blocks, int64_t T, bool all_logits, Tensor& logits_rows) const;
  void attention_block(DecoderState& work, std::span<const RowSegment> segs, int64_t l, Tensor& x,
                       const Tensor& positions, const Tensor* blocks, int64_t T) const;
  void feed_forward_block(DecoderState& st, int64_t l, Tensor& x, int64_t T) const;
  void gelu_gate(const Exec& ex, Tensor& g, const Tensor& u) const;
  void moe_block(DecoderState& st, int64_t l, const Tensor& residual, Tensor& m, int64_t T) const;
  // acc [T, H] = Σ_j w[t, j] · expert_{ids[t, j]}(e_in[t]), experts added per token in increasing id.
  // Gathered: every (token, slot) row through its expert on the device, no host sync (decode-sized T).
  void moe_experts_gathered(DecoderState& st, const TextLayerWeights& lw, const Tensor& e_in, const Tensor& top_w,
                            const Tensor& top_i, Tensor& acc, int64_t T) const;
  // Grouped: the host reads the routing (one sync) and runs each expert once over its tokens (prefill).
  void moe_experts_grouped(DecoderState& st, const TextLayerWeights& lw, const Tensor& e_in, const Tensor& top_w,
                           const Tensor& top_i, Tensor& acc, int64_t T) const;
  // Host copy of ids with placeholders replaced by pad.
  void llm_ids(const int32_t* ids, int64_t T, int32_t* out) const;
  // Bytes of arena a chunk of T tokens needs: the high-water mark of a forward at that size run on the
  // measuring backend (runtime/measure.h), nothing executed. Measured once per T (remembered).
  size_t measure_arena(int64_t T) const;
  // The longest chunk a state of this max_context is sized for (its arena and chunk_capacity).
  int64_t session_chunk(int64_t max_context) const;
  // Grows the state's arena to at least `bytes`.
  void reserve_arena(DecoderState& state, size_t bytes) const;
  // Bidirectional blocks apply to this layer (spec §3.7 / §5.4)?
  bool layer_uses_blocks(const LayerSpec& lc) const;

  TextConfig cfg_;
  TextWeights w_;
  TextSettings settings_;
  Exec ex_;
  std::vector<Tensor> inv_freq_;  // per layer: [n] f32 rope table
  int64_t kv_shared_tail_ = 0;    // first of the trailing layers that all reuse K/V (L when none do)
  // MoE, gathered path (moe_experts_gathered, T·top_k <= kMoeGatheredRows): constants the host writes
  // once, so no host write lands in arena memory that queued dispatches may still use.
  static constexpr int64_t kMoeGatheredRows = 16;
  Tensor moe_row_token_;  // [kMoeGatheredRows] i32: row r = t·K + j belongs to token r / K
  Tensor moe_zeros_;      // [kMoeGatheredRows, H] f32 zeros (the accumulator's start)
  mutable std::mutex measured_mu_;
  mutable std::map<int64_t, size_t> measured_;  // measure_arena's results by T
};

}  // namespace mb::gemma4
