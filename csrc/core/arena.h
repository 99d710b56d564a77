// Arena: a bump allocator for activations. One forward pass allocates from it and resets it at the end,
// so steady-state decoding performs no heap allocation per token.
#pragma once
#include <cstddef>
#include <memory>

#include "core/tensor.h"

namespace mb {

class Arena {
 public:
  explicit Arena(size_t capacity_bytes);
  // An arena over address space only (reserved, never committed unless written): for a measuring pass
  // whose ops do not run, so that high_water() tells what a real arena needs. Throws when the address
  // space cannot be reserved. Its memory is not usable by a GPU backend.
  static std::unique_ptr<Arena> address_space(size_t capacity_bytes);
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // 64-byte aligned; throws MarkbaseError naming the request when the arena is exhausted (and from then
  // on exhausted() is true: a measuring pass tells which of its arenas ran out).
  void* allocate(size_t bytes, size_t align = 64);
  // A tensor whose memory lives in this arena (valid until reset past its mark).
  Tensor tensor(DType dtype, const Shape& shape);

  size_t mark() const { return used_; }
  void reset(size_t mark = 0);
  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }
  size_t high_water() const { return high_water_; }
  bool exhausted() const { return exhausted_; }

 private:
  Arena() = default;

  std::shared_ptr<char> buffer_;
  size_t capacity_ = 0, used_ = 0, high_water_ = 0;
  bool exhausted_ = false;
};

}  // namespace mb
