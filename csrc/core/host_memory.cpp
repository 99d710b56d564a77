#include "core/host_memory.h"

#include "core/alloc_count.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>


namespace mb {

namespace {

struct Registry {
  std::mutex mu;
  std::map<uintptr_t, HostRegion> by_base;  // ordered by base address: lookup is upper_bound - 1
  uint64_t next_id = 1;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: allocations may be freed during static teardown
  return *r;
}

}  // namespace

size_t host_page_size() {
  static const size_t page = [] {
    long p = ::sysconf(_SC_PAGESIZE);
    return p > 0 ? size_t(p) : size_t(4096);
  }();
  return page;
}

std::shared_ptr<void> host_alloc(size_t bytes) {
  count_host_allocation();
#ifdef MARKBASE_HAS_METAL
  const size_t page = host_page_size();
  const size_t rounded = std::max<size_t>((bytes + page - 1) / page * page, page);
  // Metal wraps only VM allocations (vm_allocate / mmap) without a copy, not malloc'd memory.
  void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANON, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  register_host_region(p, rounded);
  return std::shared_ptr<void>(p, [rounded](void* q) {
    unregister_host_region(q);
    ::munmap(q, rounded);
  });
#else
  // No GPU backend reads the registry here: a plain 64-byte aligned block (the CPU kernels' alignment).
  void* p = std::aligned_alloc(64, std::max<size_t>((bytes + 63) / 64 * 64, 64));
  if (!p) return nullptr;
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
#endif
}

void register_host_region(void* base, size_t bytes) {
#ifndef MARKBASE_HAS_METAL
  return;  // nothing reads the registry in this build
#endif
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  r.by_base[uintptr_t(base)] = HostRegion{base, bytes, r.next_id++};
}

void unregister_host_region(void* base) {
#ifndef MARKBASE_HAS_METAL
  return;
#endif
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  r.by_base.erase(uintptr_t(base));
}

bool find_host_region(const void* p, size_t bytes, HostRegion* out) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  const uintptr_t a = uintptr_t(p);
  auto it = r.by_base.upper_bound(a);
  if (it == r.by_base.begin()) return false;
  --it;
  const HostRegion& reg = it->second;
  if (a + bytes > uintptr_t(reg.base) + reg.bytes) return false;
  if (out) *out = reg;
  return true;
}

size_t host_region_count() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  return r.by_base.size();
}

}  // namespace mb
