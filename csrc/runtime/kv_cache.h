// Per-layer KV cache. Keys/values are stored token-major, [capacity, n_kv, d] f32, each slot tagged with
// its absolute position (−1 = empty) and its bidirectional block id (−1 = none), so attention masks by
// position and block, never by slot index.
//   full layers:    every token is kept; capacity grows by doubling up to max_context.
//   sliding layers: a ring of window − 1 + chunk slots: after any append of ≤ chunk tokens the window − 1
//                   tokens before the chunk are still present, which is all a query can see. `chunk` starts
//                   at max_chunk and grows (reserve_chunk) when a bidirectional block needs a longer one.
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
  // A one-slot stand-in for measuring passes (runtime/measure.h): append records nothing, the views are
  // one empty slot of the right head shape.
  static LayerKvCache phantom(int64_t n_kv, int64_t head_dim);

  // k_new, v_new: [T, n_kv, d] f32 for absolute positions p0 .. p0 + T − 1 (T ≤ the chunk capacity on
  // rings); blocks: T host block ids or null (none). The rows are copied with the copy op on `ex`'s device;
  // the position and block tags are host metadata.
  void append(const Tensor& k_new, const Tensor& v_new, int64_t p0, const int32_t* blocks, const Exec& ex = {});
  void reset();
  // Drops every token at position >= n (keeps the first n). False when a ring no longer holds the
  // window − 1 tokens before n (they were overwritten), in which case nothing changes.
  bool truncate(int64_t n);
  bool can_truncate(int64_t n) const;
  // Rings: room for chunks of T tokens (re-lays the held tokens out in a larger ring). Full caches: no-op.
  void reserve_chunk(int64_t T);

  // The slots attention should scan: [S, n_kv, d] views, their positions and block ids [S] (i32, −1 =
  // empty slot / no block).
  Tensor keys() const;
  Tensor values() const;
  Tensor positions() const;
  Tensor blocks() const;
  int64_t tokens_held() const;
  size_t bytes() const { return k_.nbytes() + v_.nbytes() + pos_.nbytes() + blocks_.nbytes(); }

 private:
  void grow_to(int64_t capacity);
  int64_t slot_of(int64_t token) const { return (token + slot_base_) % capacity_; }

  int64_t n_kv_ = 0, d_ = 0, window_ = 0, max_context_ = 0;
  int64_t capacity_ = 0;
  int64_t written_ = 0;    // tokens appended since reset (= the next position)
  int64_t slot_base_ = 0;  // token i lives in slot (i + slot_base_) % capacity_
  bool phantom_ = false;
  Tensor k_, v_, pos_, blocks_;
};

}  // namespace mb::runtime
