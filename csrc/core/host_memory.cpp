#include "core/host_memory.h"

#include "core/alloc_count.h"
#include "core/runtime_switch.h"

#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
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

std::atomic<HostAllocFn>& allocator() {
  static std::atomic<HostAllocFn> fn{nullptr};
  return fn;
}

}  // namespace

size_t host_page_size() {
  static const size_t page = [] {
    long p = ::sysconf(_SC_PAGESIZE);
    return p > 0 ? size_t(p) : size_t(4096);
  }();
  return page;
}

namespace {
RuntimeSwitch g_huge_pages{"MARKBASE_HUGEPAGES"};
}

void set_huge_pages(int mode) { g_huge_pages.set(mode); }

bool huge_pages_enabled() { return g_huge_pages.enabled(); }

std::shared_ptr<void> host_alloc(size_t bytes) {
  count_host_allocation();
  if (HostAllocFn fn = allocator().load(std::memory_order_acquire)) return fn(bytes);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Large blocks (weights repacked or quantized at load, KV caches) on 2 MiB-aligned memory the kernel may
  // back with transparent huge pages (THP "madvise" mode, the usual default): a decode step streams every
  // weight once, and on 4 KiB pages the TLB misses every 4 KiB and the hardware prefetchers stop at each
  // page boundary. Only the whole 2 MiB pages inside the block are advised: its tail stays on small pages,
  // so a huge page never makes memory past the block's end resident.
  constexpr size_t kHuge = size_t(2) << 20;
  if (bytes >= 2 * kHuge && huge_pages_enabled()) {
    void* p = nullptr;
    if (::posix_memalign(&p, kHuge, (bytes + 63) / 64 * 64) != 0) return nullptr;
    ::madvise(p, bytes / kHuge * kHuge, MADV_HUGEPAGE);  // advice only: without THP the block stays on small pages
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
#endif
  // Nothing uses host memory in place: a plain 64-byte aligned block (the CPU kernels' alignment).
  void* p = std::aligned_alloc(64, std::max<size_t>((bytes + 63) / 64 * 64, 64));
  if (!p) return nullptr;
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

bool install_host_allocator(HostAllocFn fn) {
  HostAllocFn none = nullptr;
  return allocator().compare_exchange_strong(none, fn) || none == fn;
}

void register_host_region(void* base, size_t bytes) {
  if (!allocator().load(std::memory_order_acquire)) return;  // nothing reads the registry
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  r.by_base[uintptr_t(base)] = HostRegion{base, bytes, r.next_id++};
}

void unregister_host_region(void* base) {
  if (!allocator().load(std::memory_order_acquire)) return;
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
