#include "core/arena.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/errors.h"
#include "core/host_memory.h"

namespace mb {

Arena::Arena(size_t capacity_bytes) : capacity_((capacity_bytes + 63) / 64 * 64) {
  // One host_alloc block (core/host_memory.h): a GPU backend wraps it once and binds by offset.
  std::shared_ptr<void> block = host_alloc(capacity_);
  if (!block) throw MarkbaseError(cat("out of memory reserving an arena of ", capacity_bytes, " bytes"));
  buffer_ = std::shared_ptr<char>(block, static_cast<char*>(block.get()));
}

std::unique_ptr<Arena> Arena::address_space(size_t capacity_bytes) {
  const size_t cap = (capacity_bytes + 63) / 64 * 64;
  // MAP_NORESERVE: pages cost nothing until written (a measuring pass writes only a few host-side inputs).
  void* p = ::mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw MarkbaseError(cat("cannot reserve ", cap, " bytes of address space for a measuring arena: ", std::strerror(errno)));
  std::unique_ptr<Arena> a(new Arena());
  a->capacity_ = cap;
  a->buffer_ = std::shared_ptr<char>(static_cast<char*>(p), [cap](char* q) { ::munmap(q, cap); });
  return a;
}

void* Arena::allocate(size_t bytes, size_t align) {
  if (align == 0 || (align & (align - 1))) throw InputError(cat("arena: alignment ", align, " is not a power of two"));
  size_t start = (used_ + align - 1) / align * align;
  if (start > capacity_ || bytes > capacity_ - start) {
    exhausted_ = true;
    throw MarkbaseError(cat("arena exhausted: asked for ", bytes, " bytes with ", capacity_ - std::min(start, capacity_),
                            " of ", capacity_, " left"));
  }
  used_ = start + bytes;
  if (used_ > high_water_) high_water_ = used_;
  return buffer_.get() + start;
}

Tensor Arena::tensor(DType dtype, const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw InputError(cat("arena: negative dimension in ", shape_str(shape)));
    n *= d;
  }
  size_t bytes = size_t(n / dtype_block_size(dtype)) * dtype_itemsize(dtype);
  void* p = allocate(bytes);
  // The buffer's shared_ptr keeps the memory alive; validity past reset() is the caller's contract.
  return Tensor::wrap_contiguous(p, dtype, shape, buffer_, StorageKind::Arena);
}

void Arena::reset(size_t mark) {
  if (mark > used_) throw InputError(cat("arena: reset to ", mark, " beyond used ", used_));
  used_ = mark;
}

}  // namespace mb
