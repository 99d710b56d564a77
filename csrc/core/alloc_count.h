// Heap allocations made by markbase's own code (operator new within this extension, and host_alloc), as a
// running count: tests take the difference over a stretch of work (a decode step must allocate nothing).
// The count does not see memory other libraries (numpy, Python) allocate.
#pragma once
#include <cstdint>

namespace mb {

uint64_t heap_allocations();
void count_host_allocation();

}  // namespace mb
