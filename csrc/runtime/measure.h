// The measuring backend: every op entry point does nothing. A forward run on it with an address-space
// arena (core/arena.h: Arena::address_space) walks the model code at given shapes, with every front door
// validating as usual, and the arena's high-water mark is what a real forward at those shapes needs (as
// ggml's graph allocator reserves from a measuring pass). Not a device: nothing registers it.
#pragma once
#include <cstddef>

#include "backend/backend.h"
#include "core/arena.h"
#include "core/function_ref.h"
#include "ops/exec.h"

namespace mb::runtime {

const Backend& measure_backend();
// An Exec on the measuring backend.
inline Exec measure_exec() { return Exec{&measure_backend(), false}; }

// Runs pass(activations, outputs) over two address-space arenas (outputs: where the pass allocates the
// tensors it writes its results to, apart from the activations) and returns the bytes of activation arena
// a real run of the same pass needs. Reserves address space as it goes: retries with more while the pass
// exhausts an arena.
size_t measure_arena_bytes(FunctionRef<void(Arena& activations, Arena& outputs)> pass);
}  // namespace mb::runtime
