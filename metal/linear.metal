// Linear kernels (ops/linear.h): out[m, n] = Σ_k x[m, k] · w[n, k] + bias[n], x: [M, K] f32 / bf16,
// w: [N, K] f32 / bf16 / f16, bias: [N] f32 / bf16 / f16 (optional), out: [M, N] in x's dtype.
// Every product is taken and summed in f32, the bias is added to the f32 sum, and the result is
// rounded once to out's dtype (as the CPU backend). Summation order differs from the CPU reference
// (lane partial sums / k tiles) but is fixed for a given shape.
//
// Three variants, chosen by csrc/backend/metal/linear_dispatch.cpp:
//   matvec  (decode, M <= 4; any M for a batched decode step, LinearParams::row_invariant): a simdgroup owns
//           kMatvecRows rows of w; its lanes stride over K (lane l reads k = l, l + 32, ...: neighbouring lanes
//           read neighbouring bytes), keep one f32 partial sum per (x row, w row), and simd_sum them (a float4
//           per x row: the 4 w rows in one call). Threadgroup row y of the grid takes x rows [4y, 4y + 4).
//           A row's sum does not depend on the other rows. Every weight byte is read once per 4 x rows.
//   simdmm  (prefill): a threadgroup computes a 32 x 32 tile of out; per k-step it stages 32 x 32 tiles
//           of x and w (converted to f32) in threadgroup memory, and each of its 4 simdgroups multiplies
//           a 16 x 16 quarter with 8 x 8 simdgroup_matrix multiply-accumulates.
//   tiled   (prefill, portable fallback for GPUs without simdgroup_matrix): the same 32 x 32 output
//           tile with plain threadgroup tiles (k-step 16); each of 256 threads computes 2 x 2 outputs.
//
// Kernel names linear_<variant>_<x dtype>_<w dtype>_<bias dtype>. Without a bias the dispatch uses
// bias dtype = w dtype, binds an empty buffer at buffer(2) and sets args.has_bias = 0 (never read).
//
// Bytes per call (Sx, Sw, Sb = bytes per element of x, w, bias: 4 f32, 2 bf16 / f16; plus 16 bytes of args):
//   linear_matvec_*  reads ceil(M/4)*N*K*Sw (w, once per slab of 4 x rows) + M*K*Sx per simdgroup (x, tiny and cache-resident: DRAM
//                    traffic ~M*K*Sx) + N*Sb (bias), writes M*N*Sx.
//   linear_simdmm_*, linear_tiled_*  read ceil(N/32)*M*K*Sx (x, once per column of tiles) +
//                    ceil(M/32)*N*K*Sw (w, once per row of tiles) + ceil(M/32)*N*Sb, write M*N*Sx.
#include "kernel_common.h"
#include "kernel_args.h"

// ---- matvec ----
static constant constexpr uint kMatvecRows = 4;  // w rows per simdgroup, one per float4 lane (must match linear_dispatch.cpp)
static constant constexpr uint kMatvecMaxM = 4;  // x rows handled at once (the dispatch sends M <= 4 here)

template <typename BS>
inline float bias_at(DEVICE_PTR(const BS) bias, constant LinearArgs& args, uint n) {
  return args.has_bias != 0u ? load_f32(bias[n]) : 0.0f;
}

template <typename XS, typename WS, typename BS>
// x, out: the slab's first row; M: its rows (at most kMatvecMaxM).
inline void matvec_body(DEVICE_PTR(const XS) x, DEVICE_PTR(const WS) w, DEVICE_PTR(const BS) bias, DEVICE_PTR(XS) out,
                        constant LinearArgs& args, uint M, uint group, uint simd_group, uint simd_lane, uint simdgroups) {
  const uint K = args.K, N = args.N;
  const uint n0 = (group * simdgroups + simd_group) * kMatvecRows;
  if (n0 >= N) return;  // the whole simdgroup leaves together; this kernel has no barriers
  static_assert(kMatvecRows == 4, "a simdgroup's rows are the lanes of one float4");
  float4 acc[kMatvecMaxM];  // [m][r]: the simdgroup's 4 rows side by side, summed in one exchange below
  for (uint m = 0; m < kMatvecMaxM; ++m) acc[m] = float4(0.0f);
  for (uint k = simd_lane; k < K; k += 32) {
    float4 wv;
    for (uint r = 0; r < kMatvecRows; ++r) wv[r] = n0 + r < N ? load_f32(w[(n0 + r) * K + k]) : 0.0f;
    for (uint m = 0; m < kMatvecMaxM; ++m) {
      if (m >= M) break;
      acc[m] += load_f32(x[m * K + k]) * wv;
    }
  }
  for (uint m = 0; m < kMatvecMaxM; ++m) {
    if (m >= M) break;
    const float4 s = simd_sum(acc[m]);  // every lane takes part (uniform control flow)
    if (simd_lane == 0)
      for (uint r = 0; r < kMatvecRows; ++r)
        if (n0 + r < N) out[m * N + n0 + r] = store_as<XS>(s[r] + bias_at(bias, args, n0 + r));
  }
}

// ---- tiles shared by simdmm and tiled ----
static constant constexpr uint kTileM = 32;  // out rows per threadgroup
static constant constexpr uint kTileN = 32;  // out columns per threadgroup

// Stages rows [row0, row0 + 32) x columns [k0, k0 + kStep) of src ([rows, K]) as f32 into tile
// ([32][pitch]); elements outside the matrix are 0 (they add nothing to any sum).
template <typename S, uint kStep, uint kThreads>
inline void stage_tile(DEVICE_PTR(const S) src, uint rows, uint K, uint row0, uint k0, threadgroup float* tile,
                       uint pitch, uint lidx) {
  for (uint e = lidx; e < 32 * kStep; e += kThreads) {
    const uint r = e / kStep, c = e % kStep;  // consecutive threads read consecutive k of one row
    const uint row = row0 + r, k = k0 + c;
    tile[r * pitch + c] = (row < rows && k < K) ? load_f32(src[row * K + k]) : 0.0f;
  }
}

// ---- simdmm: simdgroup_matrix tiles ----
static constant constexpr uint kMmStep = 32;  // k per stage
static constant constexpr uint kMmPitch = kMmStep + 4;  // padded row pitch of the staged tiles (fewer bank conflicts)
static constant constexpr uint kMmThreads = 128;  // 4 simdgroups in a 2 x 2 arrangement, 16 x 16 outputs each

template <typename XS, typename WS, typename BS>
inline void simdmm_body(DEVICE_PTR(const XS) x, DEVICE_PTR(const WS) w, DEVICE_PTR(const BS) bias, DEVICE_PTR(XS) out,
                        constant LinearArgs& args, uint2 group, uint lidx, uint simd_group,
                        threadgroup float* xs, threadgroup float* ws, threadgroup float* cs) {
  const uint M = args.M, K = args.K, N = args.N;
  const uint m0 = group.y * kTileM, n0 = group.x * kTileN;
  const uint sm = (simd_group / 2) * 16, sn = (simd_group % 2) * 16;  // this simdgroup's quarter
  simdgroup_float8x8 acc[2][2];
  for (uint i = 0; i < 2; ++i)
    for (uint j = 0; j < 2; ++j) acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  for (uint k0 = 0; k0 < K; k0 += kMmStep) {
    stage_tile<XS, kMmStep, kMmThreads>(x, M, K, m0, k0, xs, kMmPitch, lidx);
    stage_tile<WS, kMmStep, kMmThreads>(w, N, K, n0, k0, ws, kMmPitch, lidx);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint kk = 0; kk < kMmStep; kk += 8) {
      simdgroup_float8x8 a[2], b[2];
      for (uint i = 0; i < 2; ++i) simdgroup_load(a[i], xs, kMmPitch, ulong2(kk, sm + i * 8));
      // b = (w tile)^T: element (k, n) = ws[n][k], loaded transposed from the [n][k] layout.
      for (uint j = 0; j < 2; ++j) simdgroup_load(b[j], ws, kMmPitch, ulong2(kk, sn + j * 8), true);
      for (uint i = 0; i < 2; ++i)
        for (uint j = 0; j < 2; ++j) simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], acc[i][j]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  // Through threadgroup memory: adds the bias, rounds once, and writes only the in-range elements.
  for (uint i = 0; i < 2; ++i)
    for (uint j = 0; j < 2; ++j) simdgroup_store(acc[i][j], cs, kTileN, ulong2(sn + j * 8, sm + i * 8));
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint e = lidx; e < kTileM * kTileN; e += kMmThreads) {
    const uint m = m0 + e / kTileN, n = n0 + e % kTileN;
    if (m < M && n < N) out[m * N + n] = store_as<XS>(cs[e] + bias_at(bias, args, n));
  }
}

// ---- tiled: portable threadgroup tiles ----
static constant constexpr uint kTiledStep = 16;  // k per stage
static constant constexpr uint kTiledPitch = kTiledStep + 1;  // odd pitch: threads reading ws[tx][k] hit distinct banks
static constant constexpr uint kTiledThreads = 256;  // 16 x 16 threads, 2 x 2 outputs each

template <typename XS, typename WS, typename BS>
inline void tiled_body(DEVICE_PTR(const XS) x, DEVICE_PTR(const WS) w, DEVICE_PTR(const BS) bias, DEVICE_PTR(XS) out,
                       constant LinearArgs& args, uint2 group, uint lidx, threadgroup float* xs, threadgroup float* ws) {
  const uint M = args.M, K = args.K, N = args.N;
  const uint m0 = group.y * kTileM, n0 = group.x * kTileN;
  const uint tx = lidx % 16, ty = lidx / 16;  // outputs (ty, ty + 16) x (tx, tx + 16) of the tile
  float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
  for (uint k0 = 0; k0 < K; k0 += kTiledStep) {
    stage_tile<XS, kTiledStep, kTiledThreads>(x, M, K, m0, k0, xs, kTiledPitch, lidx);
    stage_tile<WS, kTiledStep, kTiledThreads>(w, N, K, n0, k0, ws, kTiledPitch, lidx);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint kk = 0; kk < kTiledStep; ++kk) {
      const float a0 = xs[ty * kTiledPitch + kk], a1 = xs[(ty + 16) * kTiledPitch + kk];
      const float b0 = ws[tx * kTiledPitch + kk], b1 = ws[(tx + 16) * kTiledPitch + kk];
      acc[0][0] += a0 * b0;
      acc[0][1] += a0 * b1;
      acc[1][0] += a1 * b0;
      acc[1][1] += a1 * b1;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  for (uint i = 0; i < 2; ++i)
    for (uint j = 0; j < 2; ++j) {
      const uint m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
      if (m < M && n < N) out[m * N + n] = store_as<XS>(acc[i][j] + bias_at(bias, args, n));
    }
}

// ---- kernels ----
#define MB_LINEAR_KERNELS(xd, XS, wd, WS, bd, BS)                                                                     \
  kernel void linear_matvec_##xd##_##wd##_##bd(DEVICE_PTR(const XS) x [[buffer(0)]], DEVICE_PTR(const WS) w [[buffer(1)]], \
                                               DEVICE_PTR(const BS) bias [[buffer(2)]], DEVICE_PTR(XS) out [[buffer(3)]], \
                                               constant LinearArgs& args [[buffer(4)]], MB_THREAD_POSITION) {        \
    const uint m0 = tgid.y * kMatvecMaxM; /* this threadgroup's slab of x rows */                                 \
    matvec_body<XS, WS, BS>(x + ulong(m0) * args.K, w, bias, out + ulong(m0) * args.N, args,                        \
                            min(kMatvecMaxM, args.M - m0), tgid.x, simd_group, simd_lane, tg_size.x / 32);           \
  }                                                                                                                \
  MB_REGISTER_KERNEL(linear_matvec_##xd##_##wd##_##bd)                                                             \
  kernel void linear_simdmm_##xd##_##wd##_##bd(DEVICE_PTR(const XS) x [[buffer(0)]], DEVICE_PTR(const WS) w [[buffer(1)]], \
                                               DEVICE_PTR(const BS) bias [[buffer(2)]], DEVICE_PTR(XS) out [[buffer(3)]], \
                                               constant LinearArgs& args [[buffer(4)]], MB_THREAD_POSITION) {        \
    MB_THREADGROUP(float, xs, [kTileM * kMmPitch]);                                                                \
    MB_THREADGROUP(float, ws, [kTileN * kMmPitch]);                                                                \
    MB_THREADGROUP(float, cs, [kTileM * kTileN]);                                                                  \
    simdmm_body<XS, WS, BS>(x, w, bias, out, args, tgid.xy, lidx, simd_group, xs, ws, cs);                         \
  }                                                                                                                \
  MB_REGISTER_KERNEL(linear_simdmm_##xd##_##wd##_##bd)                                                             \
  kernel void linear_tiled_##xd##_##wd##_##bd(DEVICE_PTR(const XS) x [[buffer(0)]], DEVICE_PTR(const WS) w [[buffer(1)]], \
                                              DEVICE_PTR(const BS) bias [[buffer(2)]], DEVICE_PTR(XS) out [[buffer(3)]], \
                                              constant LinearArgs& args [[buffer(4)]], MB_THREAD_POSITION) {         \
    MB_THREADGROUP(float, xs, [kTileM * kTiledPitch]);                                                             \
    MB_THREADGROUP(float, ws, [kTileN * kTiledPitch]);                                                             \
    tiled_body<XS, WS, BS>(x, w, bias, out, args, tgid.xy, lidx, xs, ws);                                          \
  }                                                                                                                \
  MB_REGISTER_KERNEL(linear_tiled_##xd##_##wd##_##bd)

#define MB_LINEAR_KERNELS_W(xd, XS, wd, WS)          \
  MB_LINEAR_KERNELS(xd, XS, wd, WS, f32, float)     \
  MB_LINEAR_KERNELS(xd, XS, wd, WS, bf16, bf16_t)   \
  MB_LINEAR_KERNELS(xd, XS, wd, WS, f16, half)

#define MB_LINEAR_KERNELS_X(xd, XS)                  \
  MB_LINEAR_KERNELS_W(xd, XS, f32, float)           \
  MB_LINEAR_KERNELS_W(xd, XS, bf16, bf16_t)         \
  MB_LINEAR_KERNELS_W(xd, XS, f16, half)

MB_LINEAR_KERNELS_X(f32, float)
MB_LINEAR_KERNELS_X(bf16, bf16_t)

// ---- gathered matvec (ops::linear_gathered): row r of x through matrix ids[r] of w ----
// Threadgroup (g, r) computes 16 outputs of row r with the matvec body (M = 1) on w + ids[r]·N·K; an id
// outside [0, E) (ids come from the device and are not checked by the host) gives a zero row.
// Bytes per call (Sw = bytes per element of w): reads R·N·K·Sw (each row its matrix; decode's top-k rows
// name distinct experts) + R·K·4 (x) + R·4 (ids), writes R·N·4; plus 20 bytes of args.
#define MB_LINEAR_GATHERED_KERNEL(wd, WS)                                                                          \
  kernel void linear_gathered_f32_##wd(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(const WS) w [[buffer(1)]], \
                                       DEVICE_PTR(const int) ids [[buffer(2)]], DEVICE_PTR(float) out [[buffer(3)]],  \
                                       constant LinearGatheredArgs& args [[buffer(4)]], MB_THREAD_POSITION) {       \
    const uint r = tgid.y, K = args.row.K, N = args.row.N;                                                         \
    const int e = ids[r];                                                                                          \
    if (e < 0 || uint(e) >= args.E) {                                                                              \
      const uint n0 = (tgid.x * (tg_size.x / 32) + simd_group) * kMatvecRows;                                      \
      if (simd_lane == 0)                                                                                          \
        for (uint i = 0; i < kMatvecRows && n0 + i < N; ++i) out[ulong(r) * N + n0 + i] = 0.0f;                    \
      return;                                                                                                      \
    }                                                                                                              \
    matvec_body<float, WS, WS>(x + ulong(r) * K, w + ulong(e) * N * K, w, out + ulong(r) * N, args.row, 1u, tgid.x,  \
                               simd_group, simd_lane, tg_size.x / 32);                                             \
  }                                                                                                                \
  MB_REGISTER_KERNEL(linear_gathered_f32_##wd)

MB_LINEAR_GATHERED_KERNEL(f32, float)
MB_LINEAR_GATHERED_KERNEL(bf16, bf16_t)
MB_LINEAR_GATHERED_KERNEL(f16, half)
