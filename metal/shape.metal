// Materialising shape ops (ops/shape.h): a strided copy of up to 4 dimensions, either moving raw bits
// (same dtype, any plain dtype, selected by element size) or converting between f32 / f16 / bf16 with
// round to nearest even. concat is one copy per part into a slice of the output (the dispatch).
//
// The conversions are integer code identical to the CPU's (csrc/core/dtype.{h,cpp}): f16 NaN → f32
// keeps the payload and sets the quiet bit; f32 NaN → f16 is ±0x7e00; f32 NaN → bf16 keeps the top
// payload bits and sets the quiet bit; subnormals are exact both ways. No hardware conversion is
// involved, so the bits do not depend on how a GPU treats subnormals or NaN payloads.
//
// Work split: one thread per element, in the row-major order of the (coalesced) shape, so neighbouring
// threads write neighbouring destination elements when the destination is dense (always for copy).
// Grid: (ceil(n / T)), T threads per group. Dispatch: csrc/backend/metal/shape_dispatch.cpp.
//
// Bytes per call (n elements, Ss / Sd bytes per source / destination element):
//   copy_raw_b<bits>        reads n·S, writes n·S (S = bits / 8);
//   copy_from_<src>_<dst>   reads n·Ss, writes n·Sd.
// (Strided sources may pull whole cache lines for fewer useful bytes.)
#include "kernel_common.h"
#include "kernel_args.h"

inline float f16_bits_to_f32(ushort h) {
  const uint sign = uint(h & 0x8000u) << 16;
  const uint e = (uint(h) >> 10) & 0x1fu;
  uint mant = uint(h) & 0x3ffu;
  uint bits;
  if (e == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int k = -1;
      do {
        mant <<= 1;
        ++k;
      } while ((mant & 0x400u) == 0);
      bits = sign | uint(127 - 15 - k) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (e == 31) {
    bits = sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x400000u : 0u);
  } else {
    bits = sign | (e + 112u) << 23 | mant << 13;
  }
  return as_type<float>(bits);
}

inline ushort f32_to_f16_bits(float f) {
  const uint x = as_type<uint>(f);
  const uint sign = (x >> 16) & 0x8000u;
  const uint ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return ushort(sign | 0x7e00u);  // NaN
  if (ax >= 0x477ff000u) return ushort(sign | 0x7c00u);  // rounds to >= 65520 -> Inf
  if (ax < 0x38800000u) {                                // result is subnormal or zero
    if (ax < 0x33000000u) return ushort(sign);           // < 2^-25 rounds to 0
    const uint e = ax >> 23;
    const uint mant = (ax & 0x7fffffu) | 0x800000u;
    const uint shift = 126 - e;  // value / 2^-24 = mant · 2^(e − 126)
    uint r = mant >> shift;
    const uint rem = mant & ((1u << shift) - 1);
    const uint half_way = 1u << (shift - 1);
    if (rem > half_way || (rem == half_way && (r & 1u))) ++r;
    return ushort(sign | r);
  }
  uint r = (ax >> 13) - (112u << 10);
  const uint rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return ushort(sign | r);
}

// Storage tags of the conversion kernels: the element type in memory and its f32 load / store.
struct F32Storage {
  typedef float T;
  static float load(float v) { return v; }
  static float store(float v) { return v; }
};
struct F16Storage {  // raw binary16 bits
  typedef ushort T;
  static float load(ushort v) { return f16_bits_to_f32(v); }
  static ushort store(float v) { return f32_to_f16_bits(v); }
};
struct BF16Storage {  // raw bfloat16 bits
  typedef ushort T;
  static float load(ushort v) { return as_type<float>(uint(v) << 16); }
  static ushort store(float v) { return store_as<bf16_t>(v).bits; }
};

// Offsets of element i (row-major over args.size) in the source and destination spans.
inline void copy_offsets(constant CopyArgs& a, uint i, thread int& so, thread int& dof) {
  so = a.src_base;
  dof = a.dst_base;
  for (int k = 3; k > 0; --k) {
    const uint q = i / a.size[k];
    const int ik = int(i - q * a.size[k]);
    so += ik * a.src_stride[k];
    dof += ik * a.dst_stride[k];
    i = q;
  }
  so += int(i) * a.src_stride[0];
  dof += int(i) * a.dst_stride[0];
}

// buffers: src (its byte span), dst (its byte span). Same dtype: the bits move unchanged.
#define MB_COPY_RAW_KERNEL(bits, T)                                                                            \
  kernel void copy_raw_b##bits(DEVICE_PTR(const T) src [[buffer(0)]], DEVICE_PTR(T) dst [[buffer(1)]],        \
                               constant CopyArgs& args [[buffer(2)]], MB_THREAD_POSITION) {                   \
    const uint i = tgid.x * tg_size.x + lidx;                                                                 \
    if (i >= args.n) return;                                                                                  \
    int so, dof;                                                                                              \
    copy_offsets(args, i, so, dof);                                                                           \
    dst[dof] = src[so];                                                                                       \
  }                                                                                                           \
  MB_REGISTER_KERNEL(copy_raw_b##bits)

MB_COPY_RAW_KERNEL(8, uchar)
MB_COPY_RAW_KERNEL(16, ushort)
MB_COPY_RAW_KERNEL(32, uint)
MB_COPY_RAW_KERNEL(64, ulong)

// buffers: src (its byte span, storage From), dst (its byte span, storage To). Value conversion via f32.
#define MB_COPY_CONVERT_KERNEL(from, From, to, To)                                                             \
  kernel void copy_from_##from##_##to(DEVICE_PTR(const From::T) src [[buffer(0)]],                           \
                                      DEVICE_PTR(To::T) dst [[buffer(1)]], constant CopyArgs& args [[buffer(2)]], \
                                      MB_THREAD_POSITION) {                                                   \
    const uint i = tgid.x * tg_size.x + lidx;                                                                 \
    if (i >= args.n) return;                                                                                  \
    int so, dof;                                                                                              \
    copy_offsets(args, i, so, dof);                                                                           \
    dst[dof] = To::store(From::load(src[so]));                                                                \
  }                                                                                                           \
  MB_REGISTER_KERNEL(copy_from_##from##_##to)

MB_COPY_CONVERT_KERNEL(f32, F32Storage, f16, F16Storage)
MB_COPY_CONVERT_KERNEL(f32, F32Storage, bf16, BF16Storage)
MB_COPY_CONVERT_KERNEL(f16, F16Storage, f32, F32Storage)
MB_COPY_CONVERT_KERNEL(f16, F16Storage, bf16, BF16Storage)
MB_COPY_CONVERT_KERNEL(bf16, BF16Storage, f32, F32Storage)
MB_COPY_CONVERT_KERNEL(bf16, BF16Storage, f16, F16Storage)
