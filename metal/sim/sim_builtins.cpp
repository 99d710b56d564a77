// metal-sim: compiler-runtime helpers the clang-compiled kernels need but an older libgcc (the
// project links with g++ 12) lacks. Compiled by the sim's clang with the kernels.
#include <cstdint>
#include <cstring>

// float -> bfloat (__bf16) conversion: round to nearest even; NaN stays NaN with the quiet bit set
// (the same rounding as mb::f32_to_bf16). Weak, so a libgcc that has it may provide it instead.
extern "C" __attribute__((weak, visibility("hidden"))) __bf16 __truncsfbf2(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t h;
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    h = uint16_t((bits >> 16) | 0x0040u);
  } else {
    bits += 0x7fffu + ((bits >> 16) & 1u);
    h = uint16_t(bits >> 16);
  }
  return __builtin_bit_cast(__bf16, h);
}
