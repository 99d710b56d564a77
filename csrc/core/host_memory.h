// Host allocations a device can use in place. A backend that wraps host memory without copying (a GPU's
// no-copy shared buffers) installs its allocator when it registers (backend/registry.h); from then on
// every heap tensor (Tensor::empty), every arena and every mapped checkpoint file is recorded here with
// its base and length, so that backend can wrap a whole allocation once and bind any view of it by
// offset. Memory not recorded here (a numpy array passed in from Python) is staged by such a backend.
// Without an installed allocator: plain 64-byte aligned blocks and nothing recorded.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace mb {

struct HostRegion {
  void* base = nullptr;  // page-aligned when the allocation came from a page-granular allocator
  size_t bytes = 0;      // the allocation's length
  uint64_t id = 0;       // unique per allocation (a re-used address gets a new id)
};

// The VM page size (4 KiB on x86 Linux, 16 KiB on Apple silicon).
size_t host_page_size();

// Allocates `bytes`, contents undefined, at least 64-byte aligned, through the installed allocator (if
// any). An empty pointer when out of memory (the caller names what it was for).
// Without an installed allocator, blocks of 4 MiB or more are 2 MiB-aligned and their whole 2 MiB pages
// advised for transparent huge pages on Linux (MARKBASE_HUGEPAGES=0: never).
std::shared_ptr<void> host_alloc(size_t bytes);
// Whether host_alloc asks for huge pages (MARKBASE_HUGEPAGES unset, or not 0 / off);
// set_huge_pages(0 / 1 / -1 = back to the environment) for tests and A/B runs.
bool huge_pages_enabled();
void set_huge_pages(int mode);

// An allocator a backend installs: same contract as host_alloc; it records what it hands out with
// register_host_region and forgets it in the deleter.
using HostAllocFn = std::shared_ptr<void> (*)(size_t bytes);
// Installs `fn` and turns on region recording. At most one per process, before the first allocation
// (backends install theirs at registration, during module load). Returns false if another is installed.
bool install_host_allocator(HostAllocFn fn);

// Records / forgets memory allocated elsewhere (a file mapping); no-ops unless an allocator is
// installed. Regions never overlap.
void register_host_region(void* base, size_t bytes);
void unregister_host_region(void* base);

// The recorded region containing [p, p + bytes), if any (returns false otherwise).
bool find_host_region(const void* p, size_t bytes, HostRegion* out);

// Number of regions currently recorded (tests).
size_t host_region_count();

}  // namespace mb
