// Convolution kernels (ops/conv.h): conv2d and the depthwise causal conv1d. Activations and outputs f32;
// weights f32 / f16 / bf16 (the kernel's dtype suffix); math and accumulation f32.
//
// Both kernels accumulate every output element exactly as the CPU reference (csrc/backend/cpu/conv.cpp):
// from 0, over the taps in increasing (ci, i, j) / j order, padding taps skipped, bias added last — so
// with contraction off (metal-sim) they reproduce the reference bit for bit.
// Dispatch: csrc/backend/metal/conv_dispatch.cpp.
#include "kernel_common.h"
#include "kernel_args.h"

// ---------------------------------------------------------------------------------------------- conv2d
// Direct convolution. A threadgroup covers T consecutive output positions p = oh·Wo + ow of one image
// (one thread each) × kConvCoTile output channels: each thread keeps kConvCoTile accumulators, so every
// input value it loads feeds kConvCoTile multiply-adds. The taps of those channels (flattened
// t = (ci·kh + i)·kw + j, K = Cin·kh·kw of them per channel) are staged as f32 in threadgroup memory in
// chunks of kConvTapChunk (coalesced loads, converted once per group instead of once per thread), a tap's
// kConvCoTile weights side by side; every thread then reads the same staged weights (a broadcast), four
// channels per float4 load.
// Grid: (ceil(Ho·Wo / T), ceil(Cout / kConvCoTile), B), T = threads per group (any; the dispatch uses <= 256).
//
// Bytes per call (K = Cin·kh·kw taps, Sw / Sb = weight / bias bytes, G = ceil(Ho·Wo / T) spatial groups,
// Q = ceil(Cout / kConvCoTile) channel groups):
//   reads  x: B·Cin·H·W·4 distinct bytes, read by each of the Q channel groups (Q·B·Cin·H·W·4 in all;
//          the overlapping windows of neighbouring outputs hit the cache), as Q·B·Ho·Wo·K loads of 4 B;
//          w: Cout·K·Sw per spatial group and image (B·G·Cout·K·Sw in all); bias: B·Cout·Ho·Wo·Sb loads
//          (Cout·Sb distinct);
//   writes out: B·Cout·Ho·Wo·4.
// Tiling constants kConvCoTile, kConvTapChunk: kernel_args.h (shared with the dispatch).

// Bias storage is chosen at run time (args.bias_kind), so one kernel per weight dtype serves every bias dtype.
inline float conv_bias(DEVICE_PTR(const uchar) bias, uint kind, uint co) {
  if (kind == kConvBiasF32) return ((DEVICE_PTR(const float))bias)[co];
  if (kind == kConvBiasF16) return load_f32(((DEVICE_PTR(const half))bias)[co]);
  if (kind == kConvBiasBF16) return load_f32(((DEVICE_PTR(const bf16_t))bias)[co]);
  return 0.0f;  // no bias: the reference still adds 0 (which turns -0 into +0)
}

template <typename W>
inline void conv2d_body(DEVICE_PTR(const float) x, DEVICE_PTR(const W) w, DEVICE_PTR(const uchar) bias,
                        DEVICE_PTR(float) out, constant Conv2dArgs& a, threadgroup float* wtile, uint3 tgid,
                        uint lidx, uint threads) {
  const uint plane = a.ho * a.wo;
  const uint p = tgid.x * threads + lidx;  // output position inside the image
  const uint co0 = tgid.y * kConvCoTile;
  const uint b = tgid.z;
  const bool active = p < plane;  // idle threads still stage weights and reach every barrier
  const uint oh = active ? p / a.wo : 0, ow = active ? p % a.wo : 0;
  const int ih0 = int(oh * a.stride_h) - int(a.pad_h), iw0 = int(ow * a.stride_w) - int(a.pad_w);
  const uint taps = a.cin * a.kh * a.kw;

  static_assert(kConvCoTile % 4 == 0, "the staged taps are read as float4s");
  float4 acc[kConvCoTile / 4];  // channel c in acc[c / 4][c % 4]
  for (uint c4 = 0; c4 < kConvCoTile / 4; ++c4) acc[c4] = float4(0.0f);
  uint ci = 0, i = 0, j = 0;  // the tap cursor (ci, i, j), carried across chunks
  for (uint t0 = 0; t0 < taps; t0 += kConvTapChunk) {
    const uint nt = min(uint(kConvTapChunk), taps - t0);
    threadgroup_barrier(mem_flags::mem_threadgroup);  // every thread is done with the previous chunk
    // wtile[t][c] = w[co0 + c, taps t0 + t] in f32 (0 for channels past Cout, never written out).
    for (uint e = lidx; e < kConvCoTile * nt; e += threads) {
      const uint c = e / nt, t = e - c * nt, co = co0 + c;
      wtile[t * kConvCoTile + c] = co < a.cout ? load_f32(w[co * taps + t0 + t]) : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (!active) continue;
    for (uint t = 0; t < nt; ++t) {
      const int ih = ih0 + int(i), iw = iw0 + int(j);
      if (ih >= 0 && ih < int(a.h) && iw >= 0 && iw < int(a.w)) {  // taps in the zero padding are skipped
        const float xv = x[((b * a.cin + ci) * a.h + uint(ih)) * a.w + uint(iw)];
        // 16-byte aligned: wtile is the kernel's only threadgroup array (offset 0; metal-sim aligns to 16 too).
        const threadgroup float4* wt = (const threadgroup float4*)(wtile + t * kConvCoTile);
        for (uint c4 = 0; c4 < kConvCoTile / 4; ++c4) acc[c4] += wt[c4] * xv;
      }
      if (++j == a.kw) {
        j = 0;
        if (++i == a.kh) {
          i = 0;
          ++ci;
        }
      }
    }
  }
  if (!active) return;
  for (uint c = 0; c < kConvCoTile; ++c) {
    const uint co = co0 + c;
    if (co < a.cout) out[((b * a.cout + co) * a.ho + oh) * a.wo + ow] = acc[c / 4][c % 4] + conv_bias(bias, a.bias_kind, co);
  }
}

// buffers: x [B, Cin, H, W] f32, w [Cout, Cin, kh, kw] W, bias [Cout] (dtype args.bias_kind; when there is
// no bias any buffer, never read), out [B, Cout, Ho, Wo] f32.
#define MB_CONV2D_KERNEL(dtype, W)                                                                              \
  kernel void conv2d_direct_##dtype(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(const W) w [[buffer(1)]], \
                                    DEVICE_PTR(const uchar) bias [[buffer(2)]], DEVICE_PTR(float) out [[buffer(3)]], \
                                    constant Conv2dArgs& args [[buffer(4)]], MB_THREAD_POSITION) {                \
    MB_THREADGROUP(float, wtile, [kConvCoTile * kConvTapChunk]);                                                 \
    conv2d_body<W>(x, w, bias, out, args, wtile, tgid, lidx, tg_size.x);                                        \
  }                                                                                                              \
  MB_REGISTER_KERNEL(conv2d_direct_##dtype)

MB_CONV2D_KERNEL(f32, float)
MB_CONV2D_KERNEL(f16, half)
MB_CONV2D_KERNEL(bf16, bf16_t)

// -------------------------------------------------------------------------- depthwise causal conv1d
// out[t, c] = Σ_j w[c, 0, j] · x[t − (K−1) + j, c] (x = 0 before t = 0). A threadgroup covers T
// consecutive channels (one thread each: neighbouring threads touch neighbouring floats of a row) ×
// kDwRows consecutive time steps; each thread computes its channel for those kDwRows steps. The taps of
// the group's channels are staged transposed ([tap][channel], f32) in threadgroup memory, kDwTapChunk
// taps per pass, so each is loaded and converted once per group and read conflict-free.
// Grid: (ceil(C / T), ceil(T_len / kDwRows)), T = threads per group (<= kDwMaxThreads).
//
// Bytes per call (Sw = weight bytes): reads x ~T_len·C·4 distinct bytes (each row is read by K output
// rows, from cache after the first), weights C·K·Sw per time block (ceil(T_len / kDwRows)·C·K·Sw in all);
// writes T_len·C·4 (out).
// Tiling constants kDwRows, kDwTapChunk, kDwMaxThreads: kernel_args.h (shared with the dispatch).

template <typename W>
inline void dwconv_body(DEVICE_PTR(const float) x, DEVICE_PTR(const W) w, DEVICE_PTR(float) out,
                        constant DepthwiseConv1dArgs& a, threadgroup float* wt, uint3 tgid, uint lidx, uint threads) {
  const uint c0 = tgid.x * threads, c = c0 + lidx;
  const uint t0 = tgid.y * kDwRows;
  const bool active = c < a.c;
  float acc[kDwRows];
  for (uint r = 0; r < kDwRows; ++r) acc[r] = 0.0f;
  for (uint j0 = 0; j0 < a.k; j0 += kDwTapChunk) {
    const uint nj = min(uint(kDwTapChunk), a.k - j0);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // wt[jj][l] = w[c0 + l, 0, j0 + jj] (consecutive e walk w's memory in order).
    for (uint e = lidx; e < threads * nj; e += threads) {
      const uint l = e / nj, jj = e - l * nj, cc = c0 + l;
      wt[jj * kDwMaxThreads + l] = cc < a.c ? load_f32(w[cc * a.k + j0 + jj]) : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (!active) continue;
    for (uint r = 0; r < kDwRows && t0 + r < a.t; ++r) {
      const int first = int(t0 + r) - int(a.k - 1) + int(j0);  // input row of tap j0
      for (uint jj = 0; jj < nj; ++jj) {
        const int src = first + int(jj);
        if (src < 0) continue;  // causal left padding reads zero
        acc[r] += wt[jj * kDwMaxThreads + lidx] * x[uint(src) * a.c + c];
      }
    }
  }
  if (!active) return;
  for (uint r = 0; r < kDwRows; ++r)
    if (t0 + r < a.t) out[(t0 + r) * a.c + c] = acc[r];
}

// buffers: x [T, C] f32, w [C, 1, K] W, out [T, C] f32.
#define MB_DWCONV_KERNEL(dtype, W)                                                                              \
  kernel void depthwise_conv1d_causal_direct_##dtype(DEVICE_PTR(const float) x [[buffer(0)]],                   \
                                                     DEVICE_PTR(const W) w [[buffer(1)]],                       \
                                                     DEVICE_PTR(float) out [[buffer(2)]],                       \
                                                     constant DepthwiseConv1dArgs& args [[buffer(3)]],          \
                                                     MB_THREAD_POSITION) {                                      \
    MB_THREADGROUP(float, wt, [kDwTapChunk * kDwMaxThreads]);                                                   \
    dwconv_body<W>(x, w, out, args, wt, tgid, lidx, tg_size.x);                                                 \
  }                                                                                                             \
  MB_REGISTER_KERNEL(depthwise_conv1d_causal_direct_##dtype)

MB_DWCONV_KERNEL(f32, float)
MB_DWCONV_KERNEL(f16, half)
MB_DWCONV_KERNEL(bf16, bf16_t)
