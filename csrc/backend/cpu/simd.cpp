#include "backend/cpu/simd.h"

#include <cstdlib>
#include <cstring>

namespace mb::cpu {

static bool simd_disabled_by_env() {
  const char* v = std::getenv("MARKBASE_SIMD");
  return v && (std::strcmp(v, "off") == 0 || std::strcmp(v, "0") == 0);
}

bool cpu_has_avx2() {
#if MB_HAVE_X86_SIMD
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
           !simd_disabled_by_env();
  }();
  return has;
#else
  (void)simd_disabled_by_env;
  return false;
#endif
}

bool cpu_has_avx512_vnni() {
#if MB_HAVE_X86_SIMD
  static const bool has = [] {
    const char* v = std::getenv("MARKBASE_SIMD");
    if (v && std::strcmp(v, "avx2") == 0) return false;
    // libgcc's __builtin_cpu_supports reports AVX-512 only when the OS saves the zmm state (XGETBV).
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }();
  return has;
#else
  return false;
#endif
}

}  // namespace mb::cpu
