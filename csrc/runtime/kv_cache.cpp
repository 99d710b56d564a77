#include "runtime/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/errors.h"
#include "ops/shape.h"

namespace mb::runtime {

LayerKvCache::LayerKvCache(int64_t n_kv, int64_t head_dim, int64_t window, int64_t max_chunk, int64_t max_context)
    : n_kv_(n_kv), d_(head_dim), window_(window), max_context_(max_context) {
  // A ring only pays when the context is longer than it; otherwise keep every token (masks still apply).
  if (window > 0 && window - 1 + max_chunk >= max_context) window_ = 0;
  if (window_ > 0) {
    grow_to(std::min(window - 1 + max_chunk, max_context));
  } else {
    grow_to(std::min<int64_t>(max_context, 256));
  }
}

LayerKvCache LayerKvCache::phantom(int64_t n_kv, int64_t head_dim) {
  LayerKvCache c;
  c.n_kv_ = n_kv;
  c.d_ = head_dim;
  c.max_context_ = 1;
  c.grow_to(1);
  c.phantom_ = true;
  return c;
}

// New storage of `capacity` slots holding the current tokens in token order from slot 0.
void LayerKvCache::grow_to(int64_t capacity) {
  Tensor k = Tensor::zeros(DType::F32, {capacity, n_kv_, d_});
  Tensor v = Tensor::zeros(DType::F32, {capacity, n_kv_, d_});
  Tensor pos = Tensor::empty(DType::I32, {capacity});
  Tensor blk = Tensor::empty(DType::I32, {capacity});
  std::fill_n(pos.data_as<int32_t>(), capacity, -1);
  std::fill_n(blk.data_as<int32_t>(), capacity, -1);
  const int64_t held = tokens_held();
  const int64_t row = n_kv_ * d_;
  for (int64_t i = 0; i < held; ++i) {  // the held tokens are the last `held` ones: written_ − held …
    const int64_t from = slot_of(written_ - held + i);
    std::memcpy(k.data_as<float>() + i * row, k_.data_as<const float>() + from * row, size_t(row) * sizeof(float));
    std::memcpy(v.data_as<float>() + i * row, v_.data_as<const float>() + from * row, size_t(row) * sizeof(float));
    pos.data_as<int32_t>()[i] = pos_.data_as<const int32_t>()[from];
    blk.data_as<int32_t>()[i] = blocks_.data_as<const int32_t>()[from];
  }
  k_ = k;
  v_ = v;
  pos_ = pos;
  blocks_ = blk;
  capacity_ = capacity;
  slot_base_ = ((held - written_) % capacity + capacity) % capacity;  // token written_ − held → slot 0
}

void LayerKvCache::reserve_chunk(int64_t T) {
  if (window_ == 0 || capacity_ - (window_ - 1) >= T) return;
  grow_to(window_ - 1 + T);
}

void LayerKvCache::append(const Tensor& k_new, const Tensor& v_new, int64_t p0, const int32_t* blocks, const Exec& ex) {
  if (phantom_) return;
  const int64_t T = k_new.size(0);
  if (window_ == 0 && written_ + T > capacity_) {
    if (written_ + T > max_context_) throw InputError(cat("KV cache: ", written_ + T, " tokens exceed the context limit ", max_context_));
    int64_t cap = capacity_;
    while (cap < written_ + T) cap *= 2;
    grow_to(std::min(cap, max_context_));
  }
  if (window_ > 0 && T > capacity_ - (window_ - 1))
    throw InputError(cat("KV cache: a chunk of ", T, " tokens exceeds the ring's chunk capacity ", capacity_ - (window_ - 1)));
  // Tokens go to slots slot_of(written_) … (mod capacity): at most two contiguous runs.
  int32_t* pd = pos_.data_as<int32_t>();
  int32_t* bd = blocks_.data_as<int32_t>();
  for (int64_t t = 0; t < T;) {
    const int64_t slot = slot_of(written_ + t);
    const int64_t run = std::min(T - t, capacity_ - slot);
    Tensor kd = k_.slice(0, slot, slot + run), vd = v_.slice(0, slot, slot + run);
    ops::copy(k_new.slice(0, t, t + run), kd, ex);
    ops::copy(v_new.slice(0, t, t + run), vd, ex);
    for (int64_t i = 0; i < run; ++i) {
      pd[slot + i] = int32_t(p0 + t + i);
      bd[slot + i] = blocks ? blocks[t + i] : -1;
    }
    t += run;
  }
  written_ += T;
}

void LayerKvCache::reset() {
  written_ = 0;
  slot_base_ = 0;
  std::fill_n(pos_.data_as<int32_t>(), capacity_, -1);
  std::fill_n(blocks_.data_as<int32_t>(), capacity_, -1);
}

bool LayerKvCache::can_truncate(int64_t n) const {
  if (n >= written_) return true;
  if (n < 0) return false;
  return window_ == 0 || written_ - n <= capacity_ - (window_ - 1);
}

bool LayerKvCache::truncate(int64_t n) {
  if (n >= written_) return true;
  if (!can_truncate(n)) return false;
  int32_t* pd = pos_.data_as<int32_t>();
  int32_t* bd = blocks_.data_as<int32_t>();
  for (int64_t i = 0; i < capacity_; ++i)
    if (pd[i] >= n) {
      pd[i] = -1;
      bd[i] = -1;
    }
  written_ = n;
  return true;
}

int64_t LayerKvCache::tokens_held() const { return std::min(written_, capacity_); }

// Full caches expose only the filled prefix (token order from slot 0); rings expose every slot (empty ones
// carry position −1).
Tensor LayerKvCache::keys() const { return window_ || phantom_ ? k_ : k_.slice(0, 0, tokens_held()); }
Tensor LayerKvCache::values() const { return window_ || phantom_ ? v_ : v_.slice(0, 0, tokens_held()); }
Tensor LayerKvCache::positions() const { return window_ || phantom_ ? pos_ : pos_.slice(0, 0, tokens_held()); }
Tensor LayerKvCache::blocks() const { return window_ || phantom_ ? blocks_ : blocks_.slice(0, 0, tokens_held()); }

}  // namespace mb::runtime
