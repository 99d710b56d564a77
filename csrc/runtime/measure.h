// The measuring backend: every op entry point does nothing. A forward run on it with an address-space
// arena (core/arena.h: Arena::address_space) walks the model code at given shapes, with every front door
// validating as usual, and the arena's high-water mark is what a real forward at those shapes needs (as
// ggml's graph allocator reserves from a measuring pass). Not a device: nothing registers it.
#pragma once
#include "backend/backend.h"

namespace mb::runtime {

const Backend& measure_backend();

}  // namespace mb::runtime
