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

}  // namespace mb::cpu
