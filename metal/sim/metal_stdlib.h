// metal-sim prelude: what <metal_stdlib> gives a kernel on Apple, for clang compiling a .metal file as
// C++20 on any CPU. Included by metal/kernel_common.h when __METAL_VERSION__ is not defined.
#pragma once
// Every standard header the sim needs comes first: msl_keywords.h turns `thread`, `device`, ... into macros.
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "sim/types.h"
#include "sim/math.h"
#include "sim/device_ptr.h"
#include "sim/simd.h"
#include "sim/simdgroup_matrix.h"
#include "sim/atomic.h"
#include "sim/kernel_adapter.h"

#include "sim/msl_keywords.h"

// A device buffer parameter or pointer: DEVICE_PTR(const float) x [[buffer(0)]].
#define DEVICE_PTR(...) ::metal_sim::device_ptr<__VA_ARGS__>

// Threadgroup storage declared in a kernel body: MB_THREADGROUP(float, tile, [32][33]);
// one object per threadgroup, shared by all of its threads (the first thread to arrive allocates).
#define MB_SIM_CAT2(a, b) a##b
#define MB_SIM_CAT(a, b) MB_SIM_CAT2(a, b)
#define MB_THREADGROUP(T, name, ...) MB_SIM_THREADGROUP(T, name, __COUNTER__, __VA_ARGS__)
#define MB_SIM_THREADGROUP(T, name, id, ...)                                                    \
  static const char MB_SIM_CAT(mb_tg_key_, id) = 0;                                              \
  using MB_SIM_CAT(mb_tg_type_, id) = T __VA_ARGS__;                                              \
  MB_SIM_CAT(mb_tg_type_, id)& name = *static_cast<MB_SIM_CAT(mb_tg_type_, id)*>(                 \
      ::metal_sim::rt::threadgroup_alloc(&MB_SIM_CAT(mb_tg_key_, id), sizeof(MB_SIM_CAT(mb_tg_type_, id)), \
                                         alignof(MB_SIM_CAT(mb_tg_type_, id)), #name))

// Registers a kernel in the sim's table under its own name (a no-op on Apple).
#define MB_REGISTER_KERNEL(name) \
  static const ::metal_sim::Registrar MB_SIM_CAT(mb_sim_registrar_, name){::metal_sim::make_kernel_info<&name>(&name, #name, __FILE__)};
