// Included first by every .metal file. Defines the kernel convention for both worlds:
//   Apple (__METAL_VERSION__): MSL itself, compiled at runtime by Metal;
//   metal-sim: the same source compiled as C++20 by clang with the shims in metal/sim/.
// Convention (see metal/README.md):
//   kernel void NAME(DEVICE_PTR(const T) in [[buffer(0)]], DEVICE_PTR(T) out [[buffer(1)]], ...,
//                    constant NameArgs& args [[buffer(n)]], MB_THREAD_POSITION) { ... }
//   MB_REGISTER_KERNEL(NAME)
// Threadgroup arrays are declared in the kernel body with MB_THREADGROUP(T, name, [N]...).
#pragma once

#ifdef __METAL_VERSION__
#include <metal_stdlib>
// Every product and sum rounds on its own, as in metal-sim (-ffp-contract=off) and the CPU backend.
// Fast math off (MTLMathModeSafe) still sets FP contraction "on" (MSL spec 1.6.3): a*b + c in one
// statement may become one fused multiply-add. No compile option of newLibraryWithSource turns it
// off; this pragma does (the STDC form is the spec's equivalent for compilers without the METAL one).
#pragma METAL fp contract(off)
#pragma STDC FP_CONTRACT OFF
#define DEVICE_PTR(...) device __VA_ARGS__*
#define MB_THREADGROUP(T, name, ...) threadgroup T name __VA_ARGS__
#define MB_REGISTER_KERNEL(name)
#else
#include "sim/metal_stdlib.h"
#endif

using namespace metal;

// The fixed trailing parameters of every kernel (the sim's adapter relies on this exact list).
#define MB_THREAD_POSITION                                     \
  uint3 tid [[thread_position_in_grid]],                       \
  uint3 ltid [[thread_position_in_threadgroup]],               \
  uint3 tgid [[threadgroup_position_in_grid]],                 \
  uint3 tg_size [[threads_per_threadgroup]],                   \
  uint3 tg_count [[threadgroups_per_grid]],                    \
  uint lidx [[thread_index_in_threadgroup]],                   \
  uint simd_lane [[thread_index_in_simdgroup]],                \
  uint simd_group [[simdgroup_index_in_threadgroup]]

// ---- Storage types: every op stores f32, f16 or bf16 and computes in f32. ----
// bf16 is kept as its 16 raw bits so both worlds round identically to the CPU backend
// (round to nearest even; NaN stays NaN with the quiet bit set).
struct bf16_t {
  ushort bits;
};

inline float load_f32(float v) { return v; }
inline float load_f32(half v) { return float(v); }
inline float load_f32(bf16_t v) { return as_type<float>(uint(v.bits) << 16); }

template <typename S> inline S store_as(float v);
template <> inline float store_as<float>(float v) { return v; }
template <> inline half store_as<half>(float v) { return half(v); }
template <> inline bf16_t store_as<bf16_t>(float v) {
  uint bits = as_type<uint>(v);
  bf16_t r;
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    r.bits = ushort((bits >> 16) | 0x0040u);
  } else {
    bits += 0x7fffu + ((bits >> 16) & 1u);
    r.bits = ushort(bits >> 16);
  }
  return r;
}
