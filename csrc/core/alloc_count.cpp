// Replaces operator new / delete for this extension (the symbols stay local to it, see
// cmake/extension.version) with malloc-based versions that count calls; one relaxed atomic add each.
#include "core/alloc_count.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace mb {

namespace {
std::atomic<uint64_t> g_allocations{0};

void* counted_alloc(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}

void* counted_aligned_alloc(std::size_t n, std::size_t align) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  const std::size_t size = (n + align - 1) / align * align;  // aligned_alloc wants a multiple of align
  if (void* p = std::aligned_alloc(align, size ? size : align)) return p;
  throw std::bad_alloc();
}
}  // namespace

uint64_t heap_allocations() { return g_allocations.load(std::memory_order_relaxed); }
void count_host_allocation() { g_allocations.fetch_add(1, std::memory_order_relaxed); }

}  // namespace mb

void* operator new(std::size_t n) { return mb::counted_alloc(n); }
void* operator new[](std::size_t n) { return mb::counted_alloc(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return mb::counted_alloc(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return mb::counted_alloc(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t n, std::align_val_t a) { return mb::counted_aligned_alloc(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return mb::counted_aligned_alloc(n, std::size_t(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
