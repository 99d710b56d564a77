#include "core/dtype.h"

#include "core/errors.h"

namespace mb {

size_t dtype_itemsize(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: return 2;
    case DType::I64: return 8;
    case DType::U8: case DType::BOOL: return 1;
    case DType::Q8_0: return 34;  // 32 int8 + f16 scale
    case DType::Q4_0: return 18;  // 32 nibbles + f16 scale
  }
  return 0;
}

int64_t dtype_block_size(DType t) { return (t == DType::Q8_0 || t == DType::Q4_0) ? 32 : 1; }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
    case DType::BOOL: return "bool";
    case DType::Q8_0: return "q8_0";
    case DType::Q4_0: return "q4_0";
  }
  return "?";
}

DType dtype_from_name(std::string_view n) {
  if (n == "f32" || n == "float32") return DType::F32;
  if (n == "bf16" || n == "bfloat16") return DType::BF16;
  if (n == "f16" || n == "float16") return DType::F16;
  if (n == "i32" || n == "int32") return DType::I32;
  if (n == "i64" || n == "int64") return DType::I64;
  if (n == "u8" || n == "uint8") return DType::U8;
  if (n == "bool") return DType::BOOL;
  if (n == "q8_0") return DType::Q8_0;
  if (n == "q4_0") return DType::Q4_0;
  throw InputError(cat("unknown dtype '", n, "' (expected f32, bf16, f16, i32, i64, u8 or bool)"));
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do { mant <<= 1; ++e; } while ((mant & 0x400u) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u);
  } else {
    bits = sign | (exp + 112u) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520 -> Inf
  if (ax < 0x38800000u) {  // result is subnormal or zero
    if (ax < 0x33000000u) return uint16_t(sign);  // < 2^-25 rounds to 0
    uint32_t e = ax >> 23;
    uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // value / 2^-24 = mant * 2^(e - 126)
    uint32_t r = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = ((ax >> 13) - (112u << 10));
  uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return uint16_t(sign | r);
}

}  // namespace mb
