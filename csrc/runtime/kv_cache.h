// Per-layer KV cache. Keys/values are stored token-major, [capacity, n_kv, d] f32, each slot tagged
// with its absolute position (−1 = empty) so attention masks by position, never by slot index.
//   full layers:    every token is kept; capacity grows by doubling up to max_context.
//   sliding layers: a ring of window − 1 + max_chunk slots: after any append of ≤ max_chunk tokens the
//                   window − 1 tokens before the chunk are still present, which is all a query can see.
//                   (When max_context is no longer than that ring, a plain full cache is used instead.)
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/exec.h"

namespace mb::runtime {

class LayerKvCache {
 public:
  LayerKvCache() = default;
  // window == 0: a full (growing) cache; else a ring for a sliding window of `window` keys.
  LayerKvCache(int64_t n_kv, int64_t head_dim, int64_t window, int64_t max_chunk, int64_t max_context);

  // k_new, v_new: [T, n_kv, d] f32 for absolute positions p0 .. p0 + T − 1 (T ≤ max_chunk on rings).
  // The rows are copied with the copy op on `ex`'s device; the position tags are host metadata.
  void append(const Tensor& k_new, const Tensor& v_new, int64_t p0, const Exec& ex = {});
  void reset();
  // Drops every token at position >= n (keeps the first n). False when a ring no longer holds the
  // window − 1 tokens before n (they were overwritten), in which case nothing changes.
  bool truncate(int64_t n);
  bool can_truncate(int64_t n) const;

  // The slots attention should scan: [S, n_kv, d] views and their positions [S] (i32, −1 = empty).
  Tensor keys() const;
  Tensor values() const;
  Tensor positions() const;
  int64_t tokens_held() const;
  size_t bytes() const { return k_.nbytes() + v_.nbytes() + pos_.nbytes(); }

 private:
  void grow_to(int64_t capacity);

  int64_t n_kv_ = 0, d_ = 0, window_ = 0, max_context_ = 0;
  int64_t capacity_ = 0;
  int64_t written_ = 0;  // tokens appended since reset
  Tensor k_, v_, pos_;
};

}  // namespace mb::runtime
