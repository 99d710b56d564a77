// Replaces operator new / delete for this extension (the symbols stay local to it, see
// cmake/extension.version) with versions that count calls (one relaxed atomic add each) and then call the
// process's own global operator new / delete. Memory crosses the library boundary both ways (libstdc++
// allocates a string's buffer, inlined code here frees it), so both sides must use the same allocator:
// whatever replaced the global operators in this process (a sanitizer runtime, tcmalloc, the host app).
#include "core/alloc_count.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <new>

namespace mb {

namespace {
std::atomic<uint64_t> g_allocations{0};

// The process's global operators, found by their mangled names (ours are local, so never found).
struct GlobalOperators {
  void* (*new_)(std::size_t);
  void* (*new_array)(std::size_t);
  void* (*new_aligned)(std::size_t, std::align_val_t);
  void* (*new_array_aligned)(std::size_t, std::align_val_t);
  void (*delete_)(void*);
  void (*delete_array)(void*);
  void (*delete_aligned)(void*, std::align_val_t);
  void (*delete_array_aligned)(void*, std::align_val_t);
};

template <class Fn>
bool find(Fn& fn, const char* mangled) {
  fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, mangled));
  return fn != nullptr;
}

// Fallback when no global operator is visible (a libstdc++ linked statically and hidden): malloc for all.
void* malloc_new(std::size_t n) {
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* malloc_new_aligned(std::size_t n, std::align_val_t a) {
  const std::size_t align = std::size_t(a);
  const std::size_t size = (n + align - 1) / align * align;  // aligned_alloc wants a multiple of align
  if (void* p = std::aligned_alloc(align, size ? size : align)) return p;
  throw std::bad_alloc();
}
void malloc_delete(void* p) { std::free(p); }
void malloc_delete_aligned(void* p, std::align_val_t) { std::free(p); }

const GlobalOperators& global_operators() {
  static const GlobalOperators ops = [] {
    GlobalOperators g{};
    const bool all = find(g.new_, "_Znwm") && find(g.new_array, "_Znam") &&
                     find(g.new_aligned, "_ZnwmSt11align_val_t") && find(g.new_array_aligned, "_ZnamSt11align_val_t") &&
                     find(g.delete_, "_ZdlPv") && find(g.delete_array, "_ZdaPv") &&
                     find(g.delete_aligned, "_ZdlPvSt11align_val_t") && find(g.delete_array_aligned, "_ZdaPvSt11align_val_t");
    if (!all) g = {malloc_new, malloc_new, malloc_new_aligned, malloc_new_aligned,
                   malloc_delete, malloc_delete, malloc_delete_aligned, malloc_delete_aligned};
    return g;
  }();
  return ops;
}

template <class Fn, class... Args>
void* counted(Fn fn, Args... args) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return fn(args...);
}

template <class Fn, class... Args>
void* counted_nothrow(Fn fn, Args... args) noexcept {
  try {
    return counted(fn, args...);
  } catch (...) {
    return nullptr;
  }
}
}  // namespace

uint64_t heap_allocations() { return g_allocations.load(std::memory_order_relaxed); }
void count_host_allocation() { g_allocations.fetch_add(1, std::memory_order_relaxed); }

}  // namespace mb

using mb::global_operators;

void* operator new(std::size_t n) { return mb::counted(global_operators().new_, n); }
void* operator new[](std::size_t n) { return mb::counted(global_operators().new_array, n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return mb::counted_nothrow(global_operators().new_, n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return mb::counted_nothrow(global_operators().new_array, n);
}
void* operator new(std::size_t n, std::align_val_t a) { return mb::counted(global_operators().new_aligned, n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return mb::counted(global_operators().new_array_aligned, n, a); }
void operator delete(void* p) noexcept { global_operators().delete_(p); }
void operator delete[](void* p) noexcept { global_operators().delete_array(p); }
void operator delete(void* p, std::size_t) noexcept { global_operators().delete_(p); }
void operator delete[](void* p, std::size_t) noexcept { global_operators().delete_array(p); }
void operator delete(void* p, std::align_val_t a) noexcept { global_operators().delete_aligned(p, a); }
void operator delete[](void* p, std::align_val_t a) noexcept { global_operators().delete_array_aligned(p, a); }
void operator delete(void* p, std::size_t, std::align_val_t a) noexcept { global_operators().delete_aligned(p, a); }
void operator delete[](void* p, std::size_t, std::align_val_t a) noexcept { global_operators().delete_array_aligned(p, a); }
