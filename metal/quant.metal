// Affine-quantized weights (ops/quant.h): w[n, k] = s[n, k / g] · q[n, k] + b[n, k / g], q an unsigned
// 4- or 8-bit integer packed little-endian (8-bit: a byte each; 4-bit: two per byte, even k in the low
// nibble; a gathered table may also hold MLX's 1-3, 5 and 6 bits, a little-endian bit stream per row), s and
// b stored as f32 / bf16 / f16 (ST). Activations and outputs f32; each weight is dequantized to f32 as
// s·q + b (two roundings, as the CPU reference) before its product, and every sum is f32.
// Kernels (dispatch: csrc/backend/metal/quant_dispatch.cpp):
//   linear_quantized_matvec_q<bits>_<ST>_<BS>  decode (M <= 4; any M under LinearParams::row_invariant, grid
//       row y taking x rows [4y, 4y + 4)): a simdgroup owns kQMatvecRows rows of w, lanes stride over k (as
//       linear.metal's matvec), partial sums reduced with simd_sum (a float4 per x row); a row's sum does not
//       depend on the other rows.
//   linear_quantized_tiled_q<bits>_<ST>_<BS>   prefill: a 32 × 32 out tile per threadgroup, x and the
//       dequantized w staged through threadgroup memory 16 k at a time; 256 threads, 2 × 2 outputs each.
//   linear_quantized_gathered_q<bits>_<ST>     row r of x through matrix ids[r] of stacked w (the matvec body).
//   embedding_quantized_q<bits>_<ST>           out[t, d] = dequantized table[ids[t], d] · scale (bits 1-6, 8).
// BS: the bias dtype (bound empty and never read without a bias; the name then repeats ST).
//
// Bytes per call (Sq = bits / 8 bytes per weight, Ss = bytes per scale, g = group size):
//   matvec  reads ceil(M/4)·N·K·Sq (q, once per slab of 4 x rows) + 2·ceil(M/4)·N·(K/g)·Ss (scales, biases) + M·K·4 (x, cache-resident) + N·Sb,
//           writes M·N·4.
//   tiled   reads ceil(M/32)·N·K·(Sq + 2·Ss/g) (w, once per row of tiles) + ceil(N/32)·M·K·4 (x) + N·Sb,
//           writes M·N·4.
//   embedding  reads T·D·(Sq + 2·Ss/g) + T·4 (ids), writes T·D·4.
#include "kernel_common.h"
#include "kernel_args.h"

static constant constexpr uint kQMatvecRows = 4;  // w rows per simdgroup, one per float4 lane (quant_dispatch.cpp)
static constant constexpr uint kQMatvecMaxM = 4;
static constant constexpr uint kQTile = 32;       // tiled: out tile edge
static constant constexpr uint kQStep = 16;       // tiled: k per stage
static constant constexpr uint kQPitch = kQStep + 1;
static constant constexpr uint kQThreads = 256;

// Weight (n, k) as f32: s·q + b.
template <uint BITS, typename ST>
inline float dequant(DEVICE_PTR(const uchar) q, DEVICE_PTR(const ST) s, DEVICE_PTR(const ST) b,
                     constant QuantLinearArgs& a, uint n, uint k) {
  uint v;
  if (BITS == 8) {
    v = uint(q[n * a.row_bytes + k]);
  } else if (BITS == 4) {
    const uint byte = uint(q[n * a.row_bytes + k / 2]);
    v = (k & 1u) != 0u ? (byte >> 4) : (byte & 15u);
  } else {
    // MLX's other widths (gathered tables only): a little-endian bit stream; the second byte is read only
    // when the value straddles it, so nothing past the row is touched.
    const uint bit = k * BITS, shift = bit & 7u;
    const uint at = n * a.row_bytes + bit / 8u;
    uint two = uint(q[at]);
    if (shift + BITS > 8u) two |= uint(q[at + 1u]) << 8;
    v = (two >> shift) & ((1u << BITS) - 1u);
  }
  const uint gi = n * a.groups + k / a.group_size;
  return load_f32(s[gi]) * float(v) + load_f32(b[gi]);
}

template <typename BS>
inline float qbias_at(DEVICE_PTR(const BS) bias, constant QuantLinearArgs& a, uint n) {
  return a.has_bias != 0u ? load_f32(bias[n]) : 0.0f;
}

template <uint BITS, typename ST, typename BS>
inline void qmatvec_body(DEVICE_PTR(const float) x, DEVICE_PTR(const uchar) q, DEVICE_PTR(const ST) s,
                         DEVICE_PTR(const ST) b, DEVICE_PTR(const BS) bias, DEVICE_PTR(float) out,
                         constant QuantLinearArgs& a, uint M, uint group, uint simd_group, uint simd_lane,
                         uint simdgroups) {
  // x, out: the slab's first row; M: its rows (at most kQMatvecMaxM).
  const uint K = a.K, N = a.N;
  const uint n0 = (group * simdgroups + simd_group) * kQMatvecRows;
  if (n0 >= N) return;  // the whole simdgroup leaves together; no barriers below
  static_assert(kQMatvecRows == 4, "a simdgroup's rows are the lanes of one float4");
  float4 acc[kQMatvecMaxM];  // [m][r]: the simdgroup's 4 rows side by side, summed in one exchange below
  for (uint m = 0; m < kQMatvecMaxM; ++m) acc[m] = float4(0.0f);
  for (uint k = simd_lane; k < K; k += 32) {
    float4 wv;
    for (uint r = 0; r < kQMatvecRows; ++r) wv[r] = n0 + r < N ? dequant<BITS, ST>(q, s, b, a, n0 + r, k) : 0.0f;
    for (uint m = 0; m < kQMatvecMaxM; ++m) {
      if (m >= M) break;
      acc[m] += x[m * K + k] * wv;
    }
  }
  for (uint m = 0; m < kQMatvecMaxM; ++m) {
    if (m >= M) break;
    const float4 sum = simd_sum(acc[m]);
    if (simd_lane == 0)
      for (uint r = 0; r < kQMatvecRows; ++r)
        if (n0 + r < N) out[m * N + n0 + r] = sum[r] + qbias_at(bias, a, n0 + r);
  }
}

template <uint BITS, typename ST, typename BS>
inline void qtiled_body(DEVICE_PTR(const float) x, DEVICE_PTR(const uchar) q, DEVICE_PTR(const ST) s,
                        DEVICE_PTR(const ST) b, DEVICE_PTR(const BS) bias, DEVICE_PTR(float) out,
                        constant QuantLinearArgs& a, uint2 group, uint lidx, threadgroup float* xs, threadgroup float* ws) {
  const uint M = a.M, K = a.K, N = a.N;
  const uint m0 = group.y * kQTile, n0 = group.x * kQTile;
  const uint tx = lidx % 16, ty = lidx / 16;
  float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
  for (uint k0 = 0; k0 < K; k0 += kQStep) {
    for (uint e = lidx; e < kQTile * kQStep; e += kQThreads) {
      const uint r = e / kQStep, c = e % kQStep, k = k0 + c;
      xs[r * kQPitch + c] = (m0 + r < M && k < K) ? x[(m0 + r) * K + k] : 0.0f;
      ws[r * kQPitch + c] = (n0 + r < N && k < K) ? dequant<BITS, ST>(q, s, b, a, n0 + r, k) : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint kk = 0; kk < kQStep; ++kk) {
      const float a0 = xs[ty * kQPitch + kk], a1 = xs[(ty + 16) * kQPitch + kk];
      const float b0 = ws[tx * kQPitch + kk], b1 = ws[(tx + 16) * kQPitch + kk];
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
      if (m < M && n < N) out[m * N + n] = acc[i][j] + qbias_at(bias, a, n);
    }
}

#define MB_QLINEAR_KERNELS(bits, sd, ST, bd, BS)                                                                   \
  kernel void linear_quantized_matvec_q##bits##_##sd##_##bd(                                                      \
      DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(const uchar) q [[buffer(1)]],                           \
      DEVICE_PTR(const ST) s [[buffer(2)]], DEVICE_PTR(const ST) b [[buffer(3)]],                                 \
      DEVICE_PTR(const BS) bias [[buffer(4)]], DEVICE_PTR(float) out [[buffer(5)]],                               \
      constant QuantLinearArgs& args [[buffer(6)]], MB_THREAD_POSITION) {                                         \
    const uint m0 = tgid.y * kQMatvecMaxM; /* this threadgroup's slab of x rows */                               \
    qmatvec_body<bits, ST, BS>(x + ulong(m0) * args.K, q, s, b, bias, out + ulong(m0) * args.N, args,             \
                               min(kQMatvecMaxM, args.M - m0), tgid.x, simd_group, simd_lane, tg_size.x / 32);     \
  }                                                                                                               \
  MB_REGISTER_KERNEL(linear_quantized_matvec_q##bits##_##sd##_##bd)                                               \
  kernel void linear_quantized_tiled_q##bits##_##sd##_##bd(                                                       \
      DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(const uchar) q [[buffer(1)]],                           \
      DEVICE_PTR(const ST) s [[buffer(2)]], DEVICE_PTR(const ST) b [[buffer(3)]],                                 \
      DEVICE_PTR(const BS) bias [[buffer(4)]], DEVICE_PTR(float) out [[buffer(5)]],                               \
      constant QuantLinearArgs& args [[buffer(6)]], MB_THREAD_POSITION) {                                         \
    MB_THREADGROUP(float, xs, [kQTile * kQPitch]);                                                                \
    MB_THREADGROUP(float, ws, [kQTile * kQPitch]);                                                                \
    qtiled_body<bits, ST, BS>(x, q, s, b, bias, out, args, tgid.xy, lidx, xs, ws);                                \
  }                                                                                                               \
  MB_REGISTER_KERNEL(linear_quantized_tiled_q##bits##_##sd##_##bd)

#define MB_QLINEAR_KERNELS_S(bits, sd, ST)      \
  MB_QLINEAR_KERNELS(bits, sd, ST, f32, float)  \
  MB_QLINEAR_KERNELS(bits, sd, ST, bf16, bf16_t) \
  MB_QLINEAR_KERNELS(bits, sd, ST, f16, half)

MB_QLINEAR_KERNELS_S(4, f32, float)
MB_QLINEAR_KERNELS_S(4, bf16, bf16_t)
MB_QLINEAR_KERNELS_S(4, f16, half)
MB_QLINEAR_KERNELS_S(8, f32, float)
MB_QLINEAR_KERNELS_S(8, bf16, bf16_t)
MB_QLINEAR_KERNELS_S(8, f16, half)

// ---- gathered matvec (ops::linear_quantized_gathered): row r of x through matrix ids[r] of the stacked w ----
// Threadgroup (g, r) computes 16 outputs of row r with the matvec body (M = 1) on matrix ids[r]; an id outside
// [0, E) (ids come from the device and are not checked by the host) gives a zero row.
// Bytes per call: reads R·N·K·(Sq + 2·Ss/g) (each row its matrix; decode's top-k rows name distinct experts)
// + R·K·4 (x) + R·4 (ids), writes R·N·4.
#define MB_QGATHERED_KERNEL(bits, sd, ST)                                                                          \
  kernel void linear_quantized_gathered_q##bits##_##sd(                                                           \
      DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(const uchar) q [[buffer(1)]],                           \
      DEVICE_PTR(const ST) s [[buffer(2)]], DEVICE_PTR(const ST) b [[buffer(3)]],                                 \
      DEVICE_PTR(const int) ids [[buffer(4)]], DEVICE_PTR(float) out [[buffer(5)]],                               \
      constant QuantGatheredArgs& args [[buffer(6)]], MB_THREAD_POSITION) {                                       \
    const uint r = tgid.y, K = args.lin.K, N = args.lin.N;                                                        \
    const int e = ids[r];                                                                                         \
    if (e < 0 || uint(e) >= args.E) {                                                                             \
      const uint n0 = (tgid.x * (tg_size.x / 32) + simd_group) * kQMatvecRows;                                    \
      if (simd_lane == 0)                                                                                         \
        for (uint i = 0; i < kQMatvecRows && n0 + i < N; ++i) out[ulong(r) * N + n0 + i] = 0.0f;                  \
      return;                                                                                                     \
    }                                                                                                             \
    const ulong sb = ulong(e) * N * args.lin.groups;                                                              \
    qmatvec_body<bits, ST, ST>(x + ulong(r) * K, q + ulong(e) * N * args.lin.row_bytes, s + sb, b + sb, s,          \
                               out + ulong(r) * N, args.lin, 1u, tgid.x, simd_group, simd_lane, tg_size.x / 32);  \
  }                                                                                                               \
  MB_REGISTER_KERNEL(linear_quantized_gathered_q##bits##_##sd)

MB_QGATHERED_KERNEL(4, f32, float)
MB_QGATHERED_KERNEL(4, bf16, bf16_t)
MB_QGATHERED_KERNEL(4, f16, half)
MB_QGATHERED_KERNEL(8, f32, float)
MB_QGATHERED_KERNEL(8, bf16, bf16_t)
MB_QGATHERED_KERNEL(8, f16, half)

// ---- embedding gather: one thread per output element ----
template <uint BITS, typename ST>
inline void qgather_body(DEVICE_PTR(const uchar) q, DEVICE_PTR(const ST) s, DEVICE_PTR(const ST) b,
                         DEVICE_PTR(const int) ids, DEVICE_PTR(float) out, constant QuantEmbeddingArgs& e, uint2 pos) {
  const uint d = pos.x, t = pos.y;
  if (d >= e.lin.K || t >= e.T) return;
  const int id = ids[t];
  // Ids come from the device (not range-checked by the host): an id outside the table gives zeros.
  const bool ok = id >= 0 && uint(id) < e.lin.N;
  out[ulong(t) * e.lin.K + d] = ok ? dequant<BITS, ST>(q, s, b, e.lin, uint(id), d) * e.scale : 0.0f;
}

#define MB_QEMBEDDING_KERNEL(bits, sd, ST)                                                                         \
  kernel void embedding_quantized_q##bits##_##sd(DEVICE_PTR(const uchar) q [[buffer(0)]],                         \
                                                 DEVICE_PTR(const ST) s [[buffer(1)]],                            \
                                                 DEVICE_PTR(const ST) b [[buffer(2)]],                            \
                                                 DEVICE_PTR(const int) ids [[buffer(3)]],                         \
                                                 DEVICE_PTR(float) out [[buffer(4)]],                             \
                                                 constant QuantEmbeddingArgs& args [[buffer(5)]], MB_THREAD_POSITION) { \
    qgather_body<bits, ST>(q, s, b, ids, out, args, tid.xy);                                                      \
  }                                                                                                               \
  MB_REGISTER_KERNEL(embedding_quantized_q##bits##_##sd)

MB_QEMBEDDING_KERNEL(4, f32, float)
MB_QEMBEDDING_KERNEL(4, bf16, bf16_t)
MB_QEMBEDDING_KERNEL(4, f16, half)
MB_QEMBEDDING_KERNEL(8, f32, float)
MB_QEMBEDDING_KERNEL(8, bf16, bf16_t)
MB_QEMBEDDING_KERNEL(8, f16, half)
// MLX's other widths: a PLE table gathered at its stored width (never a linear weight).
#define MB_QEMBEDDING_DTYPES(bits)            \
  MB_QEMBEDDING_KERNEL(bits, f32, float)      \
  MB_QEMBEDDING_KERNEL(bits, bf16, bf16_t)    \
  MB_QEMBEDDING_KERNEL(bits, f16, half)
MB_QEMBEDDING_DTYPES(1)
MB_QEMBEDDING_DTYPES(2)
MB_QEMBEDDING_DTYPES(3)
MB_QEMBEDDING_DTYPES(5)
MB_QEMBEDDING_DTYPES(6)
