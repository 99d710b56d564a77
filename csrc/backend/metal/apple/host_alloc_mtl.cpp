// Host memory for the metal-cpp launcher: Metal wraps only VM allocations (vm_allocate / mmap) without a
// copy, not malloc'd memory. So with the Metal launcher built, every host allocation (heap tensors,
// arenas) is a page-aligned anonymous mapping, recorded in core/host_memory.h for launcher_mtl.cpp.
#include <sys/mman.h>

#include <algorithm>

#include "backend/metal/launcher_mtl.h"

namespace mb::metal {

namespace {

std::shared_ptr<void> page_aligned_alloc(size_t bytes) {
  const size_t page = host_page_size();
  const size_t rounded = std::max<size_t>((bytes + page - 1) / page * page, page);
  void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANON, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  register_host_region(p, rounded);
  return std::shared_ptr<void>(p, [rounded](void* q) {
    unregister_host_region(q);
    ::munmap(q, rounded);
  });
}

}  // namespace

HostAllocFn mtl_host_allocator() { return page_aligned_alloc; }

}  // namespace mb::metal
