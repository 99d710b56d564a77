// Host allocations a GPU backend can use in place. In builds with the Metal launcher every heap tensor
// (Tensor::empty), every arena and every mapped checkpoint file is recorded here with its base and
// length, so the launcher can wrap the whole allocation as one shared-storage buffer
// (newBufferWithBytesNoCopy) and bind any view of it by offset, with no copy. Memory not recorded here
// (a numpy array passed in from Python) is staged. Builds without it record nothing and allocate plainly.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace mb {

struct HostRegion {
  void* base = nullptr;  // page-aligned when the allocation came from host_alloc (see below)
  size_t bytes = 0;      // the allocation's length (a multiple of the page size for host_alloc)
  uint64_t id = 0;       // unique per allocation (a re-used address gets a new id)
};

// The VM page size (4 KiB on x86 Linux, 16 KiB on Apple silicon).
size_t host_page_size();

// Allocates `bytes`, contents undefined, at least 64-byte aligned; with the Metal launcher page-aligned,
// rounded up to whole pages and recorded until released. An empty pointer when out of memory (the caller
// names what it was for).
std::shared_ptr<void> host_alloc(size_t bytes);

// Records / forgets memory allocated elsewhere (a file mapping). Regions never overlap.
void register_host_region(void* base, size_t bytes);
void unregister_host_region(void* base);

// The recorded region containing [p, p + bytes), if any (returns false otherwise).
bool find_host_region(const void* p, size_t bytes, HostRegion* out);

// Number of regions currently recorded (tests).
size_t host_region_count();

}  // namespace mb
