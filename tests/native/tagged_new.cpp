// A replacement of the global operator new / delete that is not malloc-compatible: every block carries a
// 16-byte tag in front of the pointer handed out, and delete checks it. Preloaded into a process (see
// tests/test_foreign_allocator.py), it makes any pairing of this operator new with plain free (or malloc
// with this delete) abort, as a host app's custom allocator or a sanitizer runtime would.
#include <cstdio>
#include <cstdlib>
#include <new>

namespace {
constexpr unsigned long kTag = 0x6d61726b62617365ul;  // "markbase"

void* tagged_alloc(std::size_t n) {
  auto* p = static_cast<unsigned long*>(std::malloc(n + 16));
  if (!p) throw std::bad_alloc();
  p[0] = kTag;
  return p + 2;
}

void tagged_free(void* q) {
  if (!q) return;
  auto* p = static_cast<unsigned long*>(q) - 2;
  if (p[0] != kTag) {
    std::fprintf(stderr, "tagged_new: delete of a block this operator new did not allocate\n");
    std::abort();
  }
  p[0] = 0;
  std::free(p);
}
}  // namespace

void* operator new(std::size_t n) { return tagged_alloc(n); }
void* operator new[](std::size_t n) { return tagged_alloc(n); }
void operator delete(void* p) noexcept { tagged_free(p); }
void operator delete[](void* p) noexcept { tagged_free(p); }
void operator delete(void* p, std::size_t) noexcept { tagged_free(p); }
void operator delete[](void* p, std::size_t) noexcept { tagged_free(p); }
