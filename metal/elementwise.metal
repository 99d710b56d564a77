// Elementwise kernels (ops/elementwise.h): the unary kinds and add / mul, storage f32 / f16 / bf16,
// math in f32 with precise:: functions, each formula exactly as the CPU backend writes it
// (csrc/backend/cpu/elementwise.{h,cpp}), NaN propagating.
//
// Work split: a threadgroup of T threads covers 4*T consecutive elements; thread l handles elements
// base + l, base + l + T, base + l + 2T, base + l + 3T (neighbouring threads touch neighbouring
// elements: coalesced on a GPU). Dispatch: csrc/backend/metal/elementwise_dispatch.cpp.
//
// Bytes per call (S = bytes per element: 4 f32, 2 f16 / bf16; n elements; plus the argument struct):
//   <kind>_contig_<dtype>  reads n*S (x), writes n*S (y).
//   <add|mul>_same_<dtype> reads 2*n*S (a, b), writes n*S (y).
//   <add|mul>_row_<dtype>  reads n*S (a) + nb*S (b, a row reused by every row of a: cache-resident),
//                          writes n*S (y).
#include "kernel_common.h"
#include "kernel_args.h"

constant uint kElementsPerThread = 4;

// ---- unary kinds: f(v, args) in f32 ----
struct GeluTanhOp {
  static float apply(float v, constant UnaryArgs& args) {
    const float k = 0.7978845608028654f;  // sqrt(2/pi)
    return 0.5f * v * (1.0f + precise::tanh(k * (v + 0.044715f * v * v * v)));
  }
};
struct SiluOp {
  static float apply(float v, constant UnaryArgs& args) { return v / (1.0f + precise::exp(-v)); }
};
struct ReluOp {
  // max(v, 0) that keeps NaN (metal::max would drop it)
  static float apply(float v, constant UnaryArgs& args) { return v > 0.0f ? v : (v == v ? 0.0f : v); }
};
struct SigmoidOp {
  static float apply(float v, constant UnaryArgs& args) { return 1.0f / (1.0f + precise::exp(-v)); }
};
struct SoftplusOp {
  // torch.nn.functional.softplus(beta=1, threshold=20): v > 20 ? v : log1p(e^v). MSL has no log1p;
  // log(u) * t / (u - 1) with u = 1 + t recovers what rounding 1 + t loses (Goldberg's identity).
  static float apply(float v, constant UnaryArgs& args) {
    if (v > 20.0f) return v;
    const float t = precise::exp(v);
    const float u = 1.0f + t;
    return (u == 1.0f) ? t : precise::log(u) * (t / (u - 1.0f));
  }
};
struct SoftcapOp {
  static float apply(float v, constant UnaryArgs& args) { return args.a * precise::tanh(v / args.a); }
};
struct ClampOp {
  // Explicit comparisons so NaN propagates (metal::clamp maps NaN to the lower bound).
  static float apply(float v, constant UnaryArgs& args) { return v < args.a ? args.a : (v > args.b ? args.b : v); }
};
struct ScaleOp {
  static float apply(float v, constant UnaryArgs& args) { return v * args.a; }
};

template <typename S, typename Op>
inline void unary_body(DEVICE_PTR(const S) x, DEVICE_PTR(S) y, constant UnaryArgs& args, uint group, uint lidx,
                       uint group_threads) {
  const uint base = group * group_threads * kElementsPerThread + lidx;
  for (uint k = 0; k < kElementsPerThread; ++k) {
    const uint i = base + k * group_threads;
    if (i < args.n) y[i] = store_as<S>(Op::apply(load_f32(x[i]), args));
  }
}

#define MB_UNARY_KERNEL(op, Op, dtype, S)                                                                       \
  kernel void op##_contig_##dtype(DEVICE_PTR(const S) x [[buffer(0)]], DEVICE_PTR(S) y [[buffer(1)]],            \
                                  constant UnaryArgs& args [[buffer(2)]], MB_THREAD_POSITION) {                  \
    unary_body<S, Op>(x, y, args, tgid.x, lidx, tg_size.x);                                                      \
  }                                                                                                              \
  MB_REGISTER_KERNEL(op##_contig_##dtype)

#define MB_UNARY_KERNELS(op, Op)          \
  MB_UNARY_KERNEL(op, Op, f32, float)     \
  MB_UNARY_KERNEL(op, Op, f16, half)      \
  MB_UNARY_KERNEL(op, Op, bf16, bf16_t)

MB_UNARY_KERNELS(gelu_tanh, GeluTanhOp)
MB_UNARY_KERNELS(silu, SiluOp)
MB_UNARY_KERNELS(relu, ReluOp)
MB_UNARY_KERNELS(sigmoid, SigmoidOp)
MB_UNARY_KERNELS(softplus, SoftplusOp)
MB_UNARY_KERNELS(softcap, SoftcapOp)
MB_UNARY_KERNELS(clamp, ClampOp)
MB_UNARY_KERNELS(scale, ScaleOp)

// ---- binary: y[i] = a[i] (+|*) b[j], j = i (same shape) or i % nb (b repeats: a row or one element) ----
struct AddOp {
  static float apply(float a, float b) { return a + b; }
};
struct MulOp {
  static float apply(float a, float b) { return a * b; }
};

template <typename S, typename Op, bool kRow>
inline void binary_body(DEVICE_PTR(const S) a, DEVICE_PTR(const S) b, DEVICE_PTR(S) y, constant BinaryArgs& args,
                        uint group, uint lidx, uint group_threads) {
  const uint base = group * group_threads * kElementsPerThread + lidx;
  for (uint k = 0; k < kElementsPerThread; ++k) {
    const uint i = base + k * group_threads;
    if (i < args.n) {
      const uint j = kRow ? i % args.nb : i;
      y[i] = store_as<S>(Op::apply(load_f32(a[i]), load_f32(b[j])));
    }
  }
}

#define MB_BINARY_KERNEL(op, Op, variant, kRow, dtype, S)                                                        \
  kernel void op##_##variant##_##dtype(DEVICE_PTR(const S) a [[buffer(0)]], DEVICE_PTR(const S) b [[buffer(1)]], \
                                       DEVICE_PTR(S) y [[buffer(2)]], constant BinaryArgs& args [[buffer(3)]],   \
                                       MB_THREAD_POSITION) {                                                     \
    binary_body<S, Op, kRow>(a, b, y, args, tgid.x, lidx, tg_size.x);                                            \
  }                                                                                                              \
  MB_REGISTER_KERNEL(op##_##variant##_##dtype)

#define MB_BINARY_KERNELS(op, Op)                      \
  MB_BINARY_KERNEL(op, Op, same, false, f32, float)    \
  MB_BINARY_KERNEL(op, Op, same, false, f16, half)     \
  MB_BINARY_KERNEL(op, Op, same, false, bf16, bf16_t)  \
  MB_BINARY_KERNEL(op, Op, row, true, f32, float)      \
  MB_BINARY_KERNEL(op, Op, row, true, f16, half)       \
  MB_BINARY_KERNEL(op, Op, row, true, bf16, bf16_t)

MB_BINARY_KERNELS(add, AddOp)
MB_BINARY_KERNELS(mul, MulOp)
