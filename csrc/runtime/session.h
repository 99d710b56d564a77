// A decoding session over a loaded model: one KV cache, the position, the context limit, and the logits
// of the last forward in a buffer the session owns. prefill / decode / step run the decoder; step samples
// the next token in C++, so a generation loop never moves the [vocab] logits across the Python boundary.
// Every forward first checks the checkpoint's files (Gemma4Model::check_files_unchanged: one fstat each),
// so a file truncated under a live session is a CheckpointError, not a SIGBUS at the first lost page.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "core/tensor.h"
#include "models/gemma4/model.h"
#include "runtime/nonfinite.h"
#include "runtime/sampler.h"

namespace mb::runtime {

class Session {
 public:
  Session(std::shared_ptr<const gemma4::Gemma4Model> model, int64_t max_context);

  const gemma4::Gemma4Model& model() const { return *model_; }
  int64_t position() const { return state_->position; }
  int64_t max_context() const { return max_context_; }
  size_t cache_bytes() const;
  // The activation arena's size: measured for the longest chunk (runtime/measure.h).
  size_t arena_bytes() const { return state_->arena->capacity(); }
  void reset();
  // Rolls back to the first n tokens; false (nothing changed) when a sliding ring no longer holds what
  // position n needs. InputError when n is outside [0, position].
  bool truncate(int64_t n);

  // Runs T tokens. Returns the logits of the last position [1, V] (the session's buffer, valid until the
  // next forward) or, with all_logits, [T, V] (a fresh tensor). Non-finite logits are a NumericsError
  // (with MARKBASE_CHECK_FINITE=1 at load, raised at the first non-finite intermediate, naming it). A
  // forward that fails rolls the session back to where it was (or, when a sliding ring cannot, resets it).
  Tensor prefill(const int32_t* ids, int64_t T, bool all_logits);
  // Same with caller-made embeddings x [T, H] f32 (soft tokens in place of placeholders) and optional
  // bidirectional block ids [T] (−1 none; ids ≥ 0 local to this call).
  Tensor prefill_embeds(const Tensor& x, const int32_t* ids, const int32_t* block_ids, int64_t T, bool all_logits);
  // One token: the session's [1, V] buffer.
  Tensor decode(int32_t id);
  // The last forward's logits [1, V] (the session's buffer; valid after a prefill / decode).
  const Tensor& last_logits() const { return last_logits_; }
  // The next token drawn from the last position's logits (after a prefill / decode).
  int32_t sample(Sampler& sampler);
  // decode(id) then sample: one generation step, nothing leaves C++ but the new id.
  int32_t step(int32_t id, Sampler& sampler);

  // One decode step of several sessions of one model at once (TextDecoder::forward_batch: the weights read
  // once for all of them): ids[b] is session b's next token. Each session's logits buffer gets its row,
  // so sample() and step_batch read it. InputError for an empty list, a repeated session, sessions of
  // different models or one without room; a failing step rolls every session back.
  static void decode_batch(std::span<Session* const> sessions, const int32_t* ids);
  // decode_batch then each session's sampler: out[b] = session b's next token.
  static void step_batch(std::span<Session* const> sessions, const int32_t* ids, std::span<Sampler* const> samplers,
                         int32_t* out);

 private:
  void check_room(int64_t T) const;
  void check_finite(const Tensor& logits) const;
  // Runs `forward` (traced with MARKBASE_CHECK_FINITE), rolling back on any exception.
  template <class F>
  void run_forward(F&& forward);
  // Back to `position` after a failed forward (or empty, when a sliding ring cannot go back).
  void roll_back(int64_t position);
  void clear();  // reset() without the in-use guard (called under one)

  // Set while a call runs: a second thread using the same session gets an InputError, not a torn cache.
  class InUse;
  std::atomic<bool> busy_{false};
  std::shared_ptr<const gemma4::Gemma4Model> model_;
  int64_t max_context_;
  std::unique_ptr<gemma4::DecoderState> state_;
  Tensor last_logits_;  // [1, V] f32
  bool have_logits_ = false;
};

// Runs ids [T] (or embeddings x [T, H] with ids and optional block ids) from an empty cache with every op
// checked (runtime/nonfinite.h) and returns where the first NaN / Inf appeared (report.found false: none).
NonFiniteReport trace_nonfinite(const gemma4::Gemma4Model& model, const int32_t* ids, int64_t T, const Tensor& x = {},
                                const int32_t* block_ids = nullptr);

}  // namespace mb::runtime
