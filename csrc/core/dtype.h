// Element types and the scalar conversions every kernel shares.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace mb {

enum class DType : uint8_t {
  F32, BF16, F16, I32, I64, U8, BOOL,
  // Block-quantised formats (slot reserved for the quantisation issue; no op accepts them yet).
  Q8_0, Q4_0,
};

// Bytes per element; for block formats, bytes per block (see dtype_block_size).
size_t dtype_itemsize(DType t);
// Elements per storage block: 1 for plain types, 32 for Q8_0 / Q4_0.
int64_t dtype_block_size(DType t);
const char* dtype_name(DType t);
// Parses "f32", "float32", "bf16", "bfloat16", ... ; throws InputError naming the string.
DType dtype_from_name(std::string_view name);
inline bool dtype_is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// bf16 <-> f32. Rounds to nearest even; NaN stays NaN (quiet bit forced so it never becomes Inf).
inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

// IEEE binary16 <-> f32, round to nearest even, subnormals and Inf/NaN handled.
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Typed load/store so one kernel template serves f32 / bf16 / f16 storage with f32 math.
struct bf16_t { uint16_t bits; };
struct f16_t { uint16_t bits; };

inline float load_f32(const float* p) { return *p; }
inline float load_f32(const bf16_t* p) { return bf16_to_f32(p->bits); }
inline float load_f32(const f16_t* p) { return f16_to_f32(p->bits); }
inline void store_f32(float* p, float v) { *p = v; }
inline void store_f32(bf16_t* p, float v) { p->bits = f32_to_bf16(v); }
inline void store_f32(f16_t* p, float v) { p->bits = f32_to_f16(v); }

}  // namespace mb
