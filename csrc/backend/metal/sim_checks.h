// metal-sim checks beyond bounds and bindings, chosen per dispatch by MARKBASE_SIM_CHECKS:
//   full  (default): threadgroup-memory races and uninitialised reads (sim_shadow.h), and uniform
//                    simdgroup calls (every simd_*, simdgroup_barrier and simdgroup_matrix call reached
//                    by the simdgroup's active lanes together, at the same call);
//   basic:           only what is always checked (bounds, alignment, bindings, barrier deadlocks); the
//                    benchmarks use it.
// The kernels see threadgroup-memory accesses through clang's load/store instrumentation
// (-fsanitize-coverage=trace-loads,trace-stores on the metal-sim objects): this file defines the hooks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace mb::metal::sim {

enum class Checks : uint8_t { Basic, Full };

// MARKBASE_SIM_CHECKS read now ("full" when unset or empty); any other value is an InputError.
Checks checks_from_env();

// Threadgroup memory of every GroupRunner lives in one reserved range, so the access hooks can tell a
// threadgroup-memory access from any other with one comparison.
unsigned char* take_arena();
void give_back_arena(unsigned char* arena);

// Code locations for messages: `code` is an offset into this library (code_offset of a return
// address); the result names the kernel source line ("metal/norm.metal:41"), or the offset when no
// line table or addr2line is at hand.
uint32_t code_offset(const void* return_address);
// "/abs/.../metal/x.metal:12" -> "metal/x.metal:12" (paths in messages start at the project's metal/).
std::string source_path(const std::string& where);
std::string code_location(uint32_t code);

}  // namespace mb::metal::sim
