// Affine-quantized linear and embedding kernels (ops/quant.h). A weight is s·q + b per group of
// `group_size` columns, q a 4- or 8-bit unsigned integer; all products and sums are f32.
#include "backend/cpu/quant.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/quant_round.h"
#include "backend/cpu/simd.h"
#include "core/file_map.h"
#include "core/thread_pool.h"

namespace mb::cpu {

namespace {

float bias_at(const Tensor* bias, int64_t n) {
  if (!bias) return 0.f;
  float v = 0.f;
  dispatch_float(bias->dtype(), [&](auto tag) { v = load_f32(bias->data_as<const decltype(tag)>() + n); });
  return v;
}

int64_t id_at(const Tensor& ids, int64_t t) {
  return ids.dtype() == DType::I32 ? int64_t(ids.data_as<const int32_t>()[t]) : ids.data_as<const int64_t>()[t];
}

// ---------------------------------------------------------------------------------------- decode (GEMV)
// Weight rows per tile: independent streams and accumulators (8 streams measured slower from DRAM: 2·R more
// scale / bias streams, and spills).
constexpr int kTileRows = 4;

// One x row against R weight rows: out[r] = Σ_g s[r,g]·(Σ_{k∈g} q·x) + b[r,g]·xsum[g]. For 4-bit the x
// row comes deinterleaved (xe: even columns, xo: odd), matching the low / high nibbles of each byte.
struct GemvArgs {
  const float* x;     // [K] (8-bit)
  const float* xe;    // [K/2] (4-bit)
  const float* xo;    // [K/2] (4-bit)
  const float* xsum;  // [G]: Σ x over each group
  const uint8_t* q;   // first row's packed values
  int64_t row_bytes;  // bytes from one of the tile's rows to the next (its streams' spacing)
  int64_t G;          // groups per row
  int gs;             // group size
  int64_t scale_stride;  // scales / biases from one of the tile's rows to the next
  int64_t next_row;      // bytes from a row to the next row of its own stream (what to prefetch)
  // 16-bit activations (x16 kernels only): x ≈ dx[g]·x16, x16 [K] as x (8-bit) or as xe then xo (4-bit).
  const int16_t* x16;
  const float* dx;  // [G]
  // 8-bit activations (x8 kernels, 4-bit weights only): x ≈ dx[g]·x8, x8 [K] even columns then odd.
  const int8_t* x8;
};

template <int R, int BITS, class ST>
void gemv_rows_portable(const GemvArgs& a, const ST* s, const ST* b, float* out) {
  float acc[R] = {}, bacc[R] = {};
  for (int64_t g = 0; g < a.G; ++g) {
    float d[R] = {};
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = a.q + r * a.row_bytes;
      if constexpr (BITS == 8) {
        for (int j = 0; j < a.gs; ++j) d[r] += float(row[g * a.gs + j]) * a.x[g * a.gs + j];
      } else {
        for (int j = 0; j < a.gs / 2; ++j) {
          const uint8_t v = row[g * a.gs / 2 + j];
          d[r] += float(v & 0x0F) * a.xe[g * a.gs / 2 + j] + float(v >> 4) * a.xo[g * a.gs / 2 + j];
        }
      }
      acc[r] += load_f32(s + r * a.scale_stride + g) * d[r];
      bacc[r] += load_f32(b + r * a.scale_stride + g) * a.xsum[g];
    }
  }
  for (int r = 0; r < R; ++r) out[r] = acc[r] + bacc[r];
}

#if MB_HAVE_X86_SIMD
// Scales and biases are 2·R more streams beside the R rows of packed values, too short for the hardware
// prefetchers to lock on: fetch those of each stream's row after next (read at the row's start).
template <class ST>
MB_AVX2_TARGET inline void prefetch_scales(const ST* s, const ST* b, int64_t G, int64_t scale_stride, int R) {
  for (int r = 0; r < R; ++r)
    for (int64_t off = 0; off < G * int64_t(sizeof(ST)); off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(s + r * scale_stride + 2 * G) + off, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b + r * scale_stride + 2 * G) + off, _MM_HINT_T0);
    }
}

// 8 values of row `row` at byte offset `off` (8-bit) widened to f32.
MB_AVX2_TARGET inline __m256 q8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// R rows × one x row; GS (the group size) fixed at compile time so the group loop unrolls and the
// accumulators stay in registers.
template <int R, int BITS, int GS, class ST>
MB_AVX2_TARGET void gemv_rows_avx2(const GemvArgs& a, const ST* s, const ST* b, float* out) {
  static_assert(R >= 1 && R <= 4);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  float bacc[4] = {0.f, 0.f, 0.f, 0.f};
  const __m256i low4 = _mm256_set1_epi32(0x0F);
  const uint8_t* q0 = a.q;
  const uint8_t* q1 = a.q + a.row_bytes;
  const uint8_t* q2 = a.q + 2 * a.row_bytes;
  const uint8_t* q3 = a.q + 3 * a.row_bytes;
  constexpr int64_t kGroupBytes = GS * BITS / 8;
  prefetch_scales(s, b, a.G, a.scale_stride, R);
  // Prefetch the same bytes of the next row of each stream (what this thread reads next): R streams are
  // too few for the hardware prefetchers alone to hide DRAM latency. Prefetches past the matrix end are
  // harmless hints (they never fault).
  for (int64_t g = 0; g < a.G; ++g) {
    for (int64_t off = 0; off < kGroupBytes; off += 64)
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(a.q + r * a.row_bytes + a.next_row + g * kGroupBytes + off),
                     _MM_HINT_T0);
    __m256 d0 = _mm256_setzero_ps(), d1 = d0, d2 = d0, d3 = d0;
    if constexpr (BITS == 8) {
      const float* xg = a.x + g * GS;
      const int64_t o = g * GS;
#pragma GCC unroll 16
      for (int j = 0; j < GS; j += 8) {
        const __m256 xv = _mm256_loadu_ps(xg + j);
        d0 = _mm256_fmadd_ps(q8x8(q0 + o + j), xv, d0);
        if constexpr (R > 1) d1 = _mm256_fmadd_ps(q8x8(q1 + o + j), xv, d1);
        if constexpr (R > 2) d2 = _mm256_fmadd_ps(q8x8(q2 + o + j), xv, d2);
        if constexpr (R > 3) d3 = _mm256_fmadd_ps(q8x8(q3 + o + j), xv, d3);
      }
    } else {
      const int64_t o = g * GS / 2;
      auto step = [&](const uint8_t* p, __m256 xev, __m256 xov, __m256 d) MB_AVX2_TARGET {
        const __m256i w = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
        d = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(w, low4)), xev, d);
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(w, 4)), xov, d);
      };
#pragma GCC unroll 8
      for (int j = 0; j < GS / 2; j += 8) {
        const __m256 xev = _mm256_loadu_ps(a.xe + o + j), xov = _mm256_loadu_ps(a.xo + o + j);
        d0 = step(q0 + o + j, xev, xov, d0);
        if constexpr (R > 1) d1 = step(q1 + o + j, xev, xov, d1);
        if constexpr (R > 2) d2 = step(q2 + o + j, xev, xov, d2);
        if constexpr (R > 3) d3 = step(q3 + o + j, xev, xov, d3);
      }
    }
    const float xs = a.xsum[g];
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(load_f32(s + g)), d0, acc0);
    bacc[0] += load_f32(b + g) * xs;
    if constexpr (R > 1) {
      acc1 = _mm256_fmadd_ps(_mm256_set1_ps(load_f32(s + a.scale_stride + g)), d1, acc1);
      bacc[1] += load_f32(b + a.scale_stride + g) * xs;
    }
    if constexpr (R > 2) {
      acc2 = _mm256_fmadd_ps(_mm256_set1_ps(load_f32(s + 2 * a.scale_stride + g)), d2, acc2);
      bacc[2] += load_f32(b + 2 * a.scale_stride + g) * xs;
    }
    if constexpr (R > 3) {
      acc3 = _mm256_fmadd_ps(_mm256_set1_ps(load_f32(s + 3 * a.scale_stride + g)), d3, acc3);
      bacc[3] += load_f32(b + 3 * a.scale_stride + g) * xs;
    }
  }
  out[0] = hsum8(acc0) + bacc[0];
  if constexpr (R > 1) out[1] = hsum8(acc1) + bacc[1];
  if constexpr (R > 2) out[2] = hsum8(acc2) + bacc[2];
  if constexpr (R > 3) out[3] = hsum8(acc3) + bacc[3];
}

// 16 bytes widened to 16 × i16.
MB_AVX2_TARGET inline __m256i widen16(const uint8_t* p) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Σ_i a[i]·b[i] over n values (a bf16 / f16 / f32 widened), in f32.
template <class T>
MB_AVX2_TARGET float dot_f32(const T* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(load8_f32(a + i), _mm256_loadu_ps(b + i), acc);
  float sum = hsum8(acc);
  for (; i < n; ++i) sum += load_f32(a + i) * b[i];
  return sum;
}

// sdx[r][i] = s[r, g0 + i]·dx[g0 + i] for the gn groups of a chunk: the f32 factor of each group's
// exact int32 sum in the x16 kernels.
template <int R, int kChunk, class ST>
MB_AVX2_TARGET inline void scale_times_dx(const GemvArgs& a, const ST* s, int64_t g0, int64_t gn, float (&sdx)[R][kChunk]) {
  for (int r = 0; r < R; ++r) {
    const ST* sr = s + r * a.scale_stride + g0;
    int64_t i = 0;
    for (; i + 8 <= gn; i += 8)
      _mm256_store_ps(sdx[r] + i, _mm256_mul_ps(load8_f32(sr + i), _mm256_loadu_ps(a.dx + g0 + i)));
    for (; i < gn; ++i) sdx[r][i] = load_f32(sr + i) * a.dx[g0 + i];
  }
}

// The same for a tile of 4 rows, group-major: sdx4[i] = s[0..3, g0 + i]·dx[g0 + i], one 128-bit vector per group
// for the x8 kernel's one-FMA-per-tile epilogue (8 groups per 4×8 transpose).
template <int kChunk, class ST>
MB_AVX2_TARGET inline void scale_times_dx_4rows(const GemvArgs& a, const ST* s, int64_t g0, int64_t gn, float (&sdx4)[kChunk][4]) {
  int64_t i = 0;
  for (; i + 8 <= gn; i += 8) {
    const __m256 dx = _mm256_loadu_ps(a.dx + g0 + i);
    __m256 v[4];  // row r's 8 groups
    for (int r = 0; r < 4; ++r) v[r] = _mm256_mul_ps(load8_f32(s + r * a.scale_stride + g0 + i), dx);
    const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);  // [a0 b0 a1 b1 | a4 b4 a5 b5]
    const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);  // [a0 b0 c0 d0 | a4 ..]
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    _mm256_store_ps(sdx4[i], _mm256_permute2f128_ps(u0, u1, 0x20));      // groups i, i + 1
    _mm256_store_ps(sdx4[i + 2], _mm256_permute2f128_ps(u2, u3, 0x20));  // i + 2, i + 3
    _mm256_store_ps(sdx4[i + 4], _mm256_permute2f128_ps(u0, u1, 0x31));  // i + 4, i + 5
    _mm256_store_ps(sdx4[i + 6], _mm256_permute2f128_ps(u2, u3, 0x31));  // i + 6, i + 7
  }
  for (; i < gn; ++i)
    for (int r = 0; r < 4; ++r) sdx4[i][r] = load_f32(s + r * a.scale_stride + g0 + i) * a.dx[g0 + i];
}

// acc[r] += b[r, g0 + i]·xsum[g0 + i] over the gn groups of a chunk (the biases' share Σ_g b·Σx, in the
// accumulators the groups' products go to; a last partial vector in tail[r]).
template <int R, class ST>
MB_AVX2_TARGET inline void bias_times_xsum(const GemvArgs& a, const ST* b, int64_t g0, int64_t gn, __m256 (&acc)[R],
                                           float (&tail)[R]) {
  for (int r = 0; r < R; ++r) {
    const ST* br = b + r * a.scale_stride + g0;
    int64_t i = 0;
    for (; i + 8 <= gn; i += 8) acc[r] = _mm256_fmadd_ps(load8_f32(br + i), _mm256_loadu_ps(a.xsum + g0 + i), acc[r]);
    for (; i < gn; ++i) tail[r] += load_f32(br + i) * a.xsum[g0 + i];
  }
}

// The groups of R rows in chunks of kXqChunk: per chunk s·dx per group (sdx) and the biases' share b·Σx (into
// acc / tail) formed at once, vectorized, then body(g0, gn, sdx) takes the chunk's gn groups from g0. The x16 /
// x8 kernels' common frame.
constexpr int64_t kXqChunk = 128;
template <int R, class ST, class Body>
MB_AVX2_TARGET inline void for_each_chunk(const GemvArgs& a, const ST* s, const ST* b, __m256 (&acc)[R],
                                          float (&tail)[R], Body&& body) {
  alignas(32) float sdx[R][kXqChunk];
  prefetch_scales(s, b, a.G, a.scale_stride, R);
  for (int64_t g0 = 0; g0 < a.G; g0 += kXqChunk) {
    const int64_t gn = std::min(kXqChunk, a.G - g0);
    scale_times_dx<R>(a, s, g0, gn, sdx);
    bias_times_xsum<R>(a, b, g0, gn, acc, tail);
    body(g0, gn, sdx);
  }
}

// As gemv_rows_avx2: the same bytes (group at offset o) of the next row of each stream, one hint per cache line.
template <int R, int64_t kGroupBytes>
MB_AVX2_TARGET inline void prefetch_next_rows(const uint8_t* const (&q)[R], int64_t next_row, int64_t o) {
  if (kGroupBytes >= 64 || (o & 63) == 0)
    for (int64_t off = 0; off < kGroupBytes; off += 64)
      for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(q[r] + next_row + o + off), _MM_HINT_T0);
}

// As gemv_rows_avx2 with x rounded to 16-bit integers per group: Σ q·x16 exact in int32 lanes
// (vpmaddwd: 16 weights widened to i16 per instruction, no float conversion per weight), then
// (s·dx)·Σ per group in f32, and b·Σx per group in the same accumulators. Half the instructions per weight of
// the f32 kernel, which is compute-bound at 4 bits on two AVX2 cores. |Σ q·x16| ≤ 255·32767·128 < 2³¹.
template <int R, int BITS, int GS, class ST>
MB_AVX2_TARGET void gemv_rows_avx2_x16(const GemvArgs& a, const ST* s, const ST* b, float* out) {
  static_assert(R >= 1 && R <= kTileRows);
  __m256 acc[R];
  float tail[R] = {};
  const uint8_t* q[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), q[r] = a.q + r * a.row_bytes;
  const __m256i low4 = _mm256_set1_epi16(0x0F);
  constexpr int64_t kGroupBytes = GS * BITS / 8;
  for_each_chunk<R>(a, s, b, acc, tail, [&](int64_t g0, int64_t gn, const float (&sdx)[R][kXqChunk]) MB_AVX2_TARGET {
    for (int64_t gi = 0; gi < gn; ++gi) {
      const int64_t g = g0 + gi, o = g * kGroupBytes;
      prefetch_next_rows<R, kGroupBytes>(q, a.next_row, o);
      __m256i d[R];
      for (int r = 0; r < R; ++r) d[r] = _mm256_setzero_si256();
      if constexpr (BITS == 8) {
        const int16_t* xg = a.x16 + g * GS;
#pragma GCC unroll 8
        for (int j = 0; j < GS; j += 16) {
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xg + j));
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) d[r] = _mm256_add_epi32(d[r], _mm256_madd_epi16(widen16(q[r] + o + j), xv));
        }
      } else {
        const int16_t* xe = a.x16 + o;
        const int16_t* xo = a.x16 + a.G * kGroupBytes + o;
#pragma GCC unroll 4
        for (int j = 0; j < GS / 2; j += 16) {
          const __m256i xev = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xe + j));
          const __m256i xov = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xo + j));
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const __m256i w = widen16(q[r] + o + j);  // byte j holds columns 2j (low nibble) and 2j + 1 (high)
            d[r] = _mm256_add_epi32(d[r], _mm256_add_epi32(_mm256_madd_epi16(_mm256_and_si256(w, low4), xev),
                                                           _mm256_madd_epi16(_mm256_srli_epi16(w, 4), xov)));
          }
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&sdx[r][gi]), _mm256_cvtepi32_ps(d[r]), acc[r]);
    }
  });
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]) + tail[r];
}

// 4-bit weights against x rounded to 8-bit integers per group (precision="fast", llama.cpp's Q8 activations):
// vpmaddubsw multiplies 32 nibbles (unsigned) by 32 x8 (signed) and adds pairs into i16 — at most
// 2·15·127 = 3810 per lane, no saturation — and a group's four such sums per lane (≤ 15240 for 128 columns)
// stay in i16 until one vpmaddwd widens them to i32: per 64 weights (group 64) two vpmaddubsw and one vpmaddwd
// against the x16 kernel's four vpmaddwd, which bounds 4-bit decode on AVX2 cores with one 128-bit multiply pipe
// (Zen 1). The sums are exact; then (s·dx)·Σ and b·Σx per group in f32, in the same accumulators.
template <int R, int GS, class ST>
MB_AVX2_TARGET void gemv_rows_avx2_x8(const GemvArgs& a, const ST* s, const ST* b, float* out) {
  static_assert(R >= 1 && R <= kTileRows);
  constexpr int64_t kGroupBytes = GS / 2;
  __m256 acc[R];
  float tail[R] = {};  // (partial bias vectors, a last odd group of 32 columns)
  const uint8_t* q[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), q[r] = a.q + r * a.row_bytes;
  const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  const int8_t* xe = a.x8;                      // even columns, at the same byte offsets as q
  const int8_t* xo = a.x8 + a.G * kGroupBytes;  // odd columns
  // Σ q·x8 over bytes [o, o + 32) of row r as i16 pairs.
  auto pairs = [&](int r, int64_t o) MB_AVX2_TARGET {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[r] + o));
    const __m256i qe = _mm256_and_si256(v, low4), qo = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    return _mm256_add_epi16(_mm256_maddubs_epi16(qe, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xe + o))),
                            _mm256_maddubs_epi16(qo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xo + o))));
  };
  if constexpr (R == 4 && kGroupBytes >= 32) {
    // A whole tile at once: vphaddw adds adjacent i16 lanes of two rows' sums into one vector (exact: a lane
    // ends with ≤ 16 products of 15·127, 30480), twice, so the 4 rows share the one vpmaddwd that widens to
    // i32 — 9 multiplies per 4 rows and group of 64 instead of 12 — and one conversion and one FMA; i32 lanes
    // (r, r + 4) are row r's.
    __m256 acc4 = _mm256_setzero_ps();
    alignas(32) float sdx4[kXqChunk][4];
    prefetch_scales(s, b, a.G, a.scale_stride, R);
    for (int64_t g0 = 0; g0 < a.G; g0 += kXqChunk) {
      const int64_t gn = std::min(kXqChunk, a.G - g0);
      scale_times_dx_4rows(a, s, g0, gn, sdx4);
      for (int64_t gi = 0; gi < gn; ++gi) {
        const int64_t o = (g0 + gi) * kGroupBytes;
        prefetch_next_rows<R, kGroupBytes>(q, a.next_row, o);
        __m256i h;  // per 128-bit half: [Σ row 0, Σ row 1, Σ row 2, Σ row 3] over the half's columns, i32
        if constexpr (kGroupBytes == 32) {  // ≤ 4 products of 15·127 per lane of pairs(): two row levels fit in i16
          const __m256i h01 = _mm256_hadd_epi16(pairs(0, o), pairs(1, o)), h23 = _mm256_hadd_epi16(pairs(2, o), pairs(3, o));
          h = _mm256_madd_epi16(_mm256_hadd_epi16(h01, h23), ones);
        } else {  // 8 products per lane: one row level in i16, the other in i32
          const __m256i p0 = _mm256_add_epi16(pairs(0, o), pairs(0, o + 32)), p1 = _mm256_add_epi16(pairs(1, o), pairs(1, o + 32));
          const __m256i p2 = _mm256_add_epi16(pairs(2, o), pairs(2, o + 32)), p3 = _mm256_add_epi16(pairs(3, o), pairs(3, o + 32));
          h = _mm256_hadd_epi32(_mm256_madd_epi16(_mm256_hadd_epi16(p0, p1), ones),
                                _mm256_madd_epi16(_mm256_hadd_epi16(p2, p3), ones));
        }
        acc4 = _mm256_fmadd_ps(_mm256_broadcast_ps(reinterpret_cast<const __m128*>(sdx4[gi])), _mm256_cvtepi32_ps(h), acc4);
      }
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc4);
    for (int r = 0; r < R; ++r) out[r] = lanes[r] + lanes[r + 4] + dot_f32(b + r * a.scale_stride, a.xsum, a.G);
    return;
  }
  for_each_chunk<R>(a, s, b, acc, tail, [&](int64_t g0, int64_t gn, const float (&sdx)[R][kXqChunk]) MB_AVX2_TARGET {
    if constexpr (kGroupBytes >= 32) {  // a group is 1 or 2 steps of 32 bytes
      for (int64_t gi = 0; gi < gn; ++gi) {
        const int64_t o = (g0 + gi) * kGroupBytes;
        prefetch_next_rows<R, kGroupBytes>(q, a.next_row, o);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          __m256i p = pairs(r, o);
          if constexpr (kGroupBytes == 64) p = _mm256_add_epi16(p, pairs(r, o + 32));
          acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&sdx[r][gi]), _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)), acc[r]);
        }
      }
    } else {  // groups of 32 columns: a step holds two, in its 128-bit halves
      int64_t gi = 0;
      for (; gi + 2 <= gn; gi += 2) {
        const int64_t o = (g0 + gi) * kGroupBytes;
        prefetch_next_rows<R, kGroupBytes>(q, a.next_row, o);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m256 sv = _mm256_insertf128_ps(_mm256_broadcast_ss(&sdx[r][gi]), _mm_broadcast_ss(&sdx[r][gi + 1]), 1);
          acc[r] = _mm256_fmadd_ps(sv, _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs(r, o), ones)), acc[r]);
        }
      }
      if (gi < gn) {  // one group left (G odd): 16 bytes
        const int64_t o = (g0 + gi) * kGroupBytes;
        const __m128i xev = _mm_loadu_si128(reinterpret_cast<const __m128i*>(xe + o));
        const __m128i xov = _mm_loadu_si128(reinterpret_cast<const __m128i*>(xo + o));
        for (int r = 0; r < R; ++r) {
          const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q[r] + o)), l4 = _mm_set1_epi8(0x0F);
          const __m128i p = _mm_add_epi16(_mm_maddubs_epi16(_mm_and_si128(v, l4), xev),
                                          _mm_maddubs_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), l4), xov));
          const __m128i d = _mm_madd_epi16(p, _mm_set1_epi16(1));
          alignas(16) int32_t lanes[4];
          _mm_store_si128(reinterpret_cast<__m128i*>(lanes), d);
          tail[r] += sdx[r][gi] * float(lanes[0] + lanes[1] + lanes[2] + lanes[3]);
        }
      }
    }
  });
  for (int r = 0; r < R; ++r) out[r] = hsum8(acc[r]) + tail[r];
}

// 32 bytes widened to 32 × i16.
MB_AVX512_TARGET inline __m512i widen32(const uint8_t* p) {
  return _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// gemv_rows_avx2_x16 on AVX-512 VNNI: the same exact int32 sums Σ q·x16 per group, 32 weights per
// vpdpwssd (multiply i16 pairs and add into i32 lanes in one instruction) instead of 16 per vpmaddwd +
// vpaddd; only the order of the f32 sums over groups differs (16 lanes, not 8). Groups of 32 (16 bytes at
// 4 bits) take the AVX2 path's 16-lane steps.
template <int R, int BITS, int GS, class ST>
MB_AVX512_TARGET void gemv_rows_avx512_x16(const GemvArgs& a, const ST* s, const ST* b, float* out) {
  static_assert(R >= 1 && R <= kTileRows);
  static_assert(GS >= 64, "a 512-bit step takes 32 columns per nibble half");
  __m512 acc[R];
  const uint8_t* q[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), q[r] = a.q + r * a.row_bytes;
  const __m512i low4 = _mm512_set1_epi16(0x0F);
  constexpr int64_t kGroupBytes = GS * BITS / 8;
  constexpr int64_t kChunk = 128;
  alignas(64) float sdx[R][kChunk];
  prefetch_scales(s, b, a.G, a.scale_stride, R);
  for (int64_t g0 = 0; g0 < a.G; g0 += kChunk) {
    const int64_t gn = std::min(kChunk, a.G - g0);
    scale_times_dx<R>(a, s, g0, gn, sdx);
    for (int64_t gi = 0; gi < gn; ++gi) {
      const int64_t g = g0 + gi, o = g * kGroupBytes;
      prefetch_next_rows<R, kGroupBytes>(q, a.next_row, o);
      __m512i d[R];
      for (int r = 0; r < R; ++r) d[r] = _mm512_setzero_si512();
      if constexpr (BITS == 8) {
        const int16_t* xg = a.x16 + g * GS;
#pragma GCC unroll 4
        for (int j = 0; j < GS; j += 32) {
          const __m512i xv = _mm512_loadu_si512(xg + j);
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) d[r] = _mm512_dpwssd_epi32(d[r], widen32(q[r] + o + j), xv);
        }
      } else {
        const int16_t* xe = a.x16 + o;
        const int16_t* xo = a.x16 + a.G * kGroupBytes + o;
#pragma GCC unroll 2
        for (int j = 0; j < GS / 2; j += 32) {
          const __m512i xev = _mm512_loadu_si512(xe + j);
          const __m512i xov = _mm512_loadu_si512(xo + j);
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const __m512i w = widen32(q[r] + o + j);  // byte j holds columns 2j (low nibble) and 2j + 1 (high)
            d[r] = _mm512_dpwssd_epi32(d[r], _mm512_and_si512(w, low4), xev);
            d[r] = _mm512_dpwssd_epi32(d[r], _mm512_srli_epi16(w, 4), xov);
          }
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(sdx[r][gi]), _mm512_cvtepi32_ps(d[r]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]) + dot_f32(b + r * a.scale_stride, a.xsum, a.G);
}
#endif

}  // namespace

// x row rounded for the x16 / x8 kernels: per group dx = max|x| / QMAX and xq = rint(x / dx) in ±QMAX
// (4-bit: even columns first, then odd, the nibble order). False when x holds a NaN or infinity:
// then the f32 kernel runs and the non-finite value reaches the output as it should.
namespace {

constexpr int kX16Max = 32767, kX8Max = 127;

template <int QMAX, class T>
bool round_xq_scalar(const float* x, int64_t K, int gs, bool deinterleave, T* xq, float* dx, float* xsum) {
  constexpr float qmax = float(QMAX);
  for (int64_t g = 0; g < K / gs; ++g) {
    const float* xg = x + g * gs;
    float amax = 0.f;
    // A NaN must end the scan (std::max(amax, NaN) keeps amax, and a later element would replace a NaN amax).
    for (int j = 0; j < gs; ++j) {
      const float a = std::fabs(xg[j]);
      if (std::isnan(a)) return false;
      amax = std::max(amax, a);
    }
    if (!std::isfinite(amax)) return false;
    dx[g] = amax / qmax;
    const float inv = amax > 0.f ? qmax / amax : 0.f;
    // For amax below ~1e-34, kMax / amax overflows a float (0 * inf would be NaN): that group scales in double.
    const double inv_tiny = std::isinf(inv) ? double(QMAX) / double(amax) : 0.0;
    double sum = 0.0;  // Σ x as round_group sums it: in double, then rounded
    for (int j = 0; j < gs; ++j) {
      const int64_t k = g * gs + j;
      const int64_t at = deinterleave ? (k & 1) * (K / 2) + k / 2 : k;
      const float scaled = std::isinf(inv) ? float(double(xg[j]) * inv_tiny) : xg[j] * inv;
      xq[at] = T(std::clamp(std::nearbyint(scaled), -qmax, qmax));
      sum += xg[j];
    }
    xsum[g] = float(sum);
  }
  return true;
}

#if MB_HAVE_X86_SIMD
// The same xq and Σ x, 16 lanes at a time (round_row).
MB_AVX512_TARGET bool round_x16_avx512(const float* x, int64_t K, int gs, bool deinterleave, int16_t* x16, float* dx,
                                       float* xsum) {
  return round_row<kX16Max>(x, K, gs, deinterleave, dx, xsum, [&](__m512i v, int64_t k) MB_AVX512_TARGET {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(x16 + k), _mm512_cvtepi32_epi16(v));
  });
}

// The same with AVX2, a group at a time (round_group_avx2), placed in the kernel's column order.
template <int QMAX, class T>
MB_AVX2_TARGET bool round_xq_avx2(const float* x, int64_t K, int gs, bool deinterleave, T* xq, float* dx, float* xsum) {
  alignas(32) int32_t q32[128];
  for (int64_t g = 0, k0 = 0; g < K / gs; ++g, k0 += gs) {
    if (!round_group_avx2<QMAX>(x + k0, gs, q32, dx + g, xsum + g)) return false;
    if (deinterleave)
      for (int j = 0; j < gs; j += 2) xq[(k0 + j) / 2] = T(q32[j]), xq[K / 2 + (k0 + j) / 2] = T(q32[j + 1]);
    else
      for (int j = 0; j < gs; ++j) xq[k0 + j] = T(q32[j]);
  }
  return true;
}
#endif

// x rounded to ±QMAX in T (int16_t x16, int8_t x8) with the widest rounding this CPU has.
template <int QMAX, class T>
bool round_xq(const float* x, int64_t K, int gs, bool deinterleave, T* xq, float* dx, float* xsum) {
#if MB_HAVE_X86_SIMD
  if constexpr (QMAX == kX16Max)
    if (gs % 32 == 0 && gs <= 128 && cpu_has_avx512_vnni()) return round_x16_avx512(x, K, gs, deinterleave, xq, dx, xsum);
  if (gs % 8 == 0 && gs <= 128 && cpu_has_avx2()) return round_xq_avx2<QMAX>(x, K, gs, deinterleave, xq, dx, xsum);
#endif
  return round_xq_scalar<QMAX>(x, K, gs, deinterleave, xq, dx, xsum);
}

}  // namespace

bool round_x16(const float* x, int64_t K, int gs, bool deinterleave, int16_t* x16, float* dx, float* xsum) {
  return round_xq<kX16Max>(x, K, gs, deinterleave, x16, dx, xsum);
}

namespace {

// x_bits: the activations' rounding the kernels may use (0: f32, 16, 8; 8 with 4-bit weights only, else 16).
template <int BITS, class ST>
void gemv(const float* X, int64_t M, const ops::QuantizedMatrix& w, const Tensor* bias, float* Y, int x_bits) {
  const int64_t N = w.rows(), K = w.cols(), G = K / w.group_size, row_bytes = w.q.size(1);
  const int gs = w.group_size;
  // Per x row: group sums, then dx [G] and, for the f32 4-bit kernels, the even / odd columns apart (the
  // nibble order); x16 / x8 [K] apart.
  thread_local std::vector<float> prep;
  thread_local std::vector<int16_t> prep16;
  thread_local std::vector<int8_t> prep8;
  const int64_t per_row = 2 * G + (BITS == 4 ? K : 0);
  if (prep.size() < size_t(M * per_row)) prep.resize(size_t(M * per_row));
  int xq = MB_HAVE_X86_SIMD && cpu_has_avx2() ? (x_bits == 8 && BITS != 4 ? 16 : x_bits) : 0;
  if (xq == 16 && prep16.size() < size_t(M * K)) prep16.resize(size_t(M * K));
  if (xq == 8 && prep8.size() < size_t(M * K)) prep8.resize(size_t(M * K));
  for (int64_t m = 0; m < M && xq; ++m) {  // a non-finite x falls back to the f32 kernels
    float *xsum = prep.data() + m * per_row, *dx = xsum + G;
    const bool ok = xq == 16 ? round_xq<kX16Max>(X + m * K, K, gs, BITS == 4, prep16.data() + m * K, dx, xsum)
                             : round_xq<kX8Max>(X + m * K, K, gs, BITS == 4, prep8.data() + m * K, dx, xsum);
    if (!ok) xq = 0;
  }
  for (int64_t m = 0; m < M && !xq; ++m) {  // the f32 kernels' group sums (and 4-bit column order)
    const float* x = X + m * K;
    float* xsum = prep.data() + m * per_row;
    for (int64_t g = 0; g < G; ++g) {
      float acc = 0.f;
      for (int j = 0; j < gs; ++j) acc += x[g * gs + j];
      xsum[g] = acc;
    }
    if (BITS == 4)
      for (int64_t k = 0; k < K / 2; ++k) xsum[2 * G + k] = x[2 * k], xsum[2 * G + K / 2 + k] = x[2 * k + 1];
  }
  using TileFn = void (*)(const GemvArgs&, const ST*, const ST*, float*);
  TileFn tile = gemv_rows_portable<kTileRows, BITS, ST>, tile1 = gemv_rows_portable<1, BITS, ST>;
#if MB_HAVE_X86_SIMD
  auto pick = [&]<int GS>() {
    if (xq == 16) tile = gemv_rows_avx2_x16<kTileRows, BITS, GS, ST>, tile1 = gemv_rows_avx2_x16<1, BITS, GS, ST>;
    else tile = gemv_rows_avx2<kTileRows, BITS, GS, ST>, tile1 = gemv_rows_avx2<1, BITS, GS, ST>;
    if constexpr (BITS == 4)
      if (xq == 8) tile = gemv_rows_avx2_x8<kTileRows, GS, ST>, tile1 = gemv_rows_avx2_x8<1, GS, ST>;
    if constexpr (GS >= 64)
      if (xq == 16 && cpu_has_avx512_vnni())
        tile = gemv_rows_avx512_x16<kTileRows, BITS, GS, ST>, tile1 = gemv_rows_avx512_x16<1, BITS, GS, ST>;
  };
  if (cpu_has_avx2()) {
    if (gs == 32) pick.template operator()<32>();
    if (gs == 64) pick.template operator()<64>();
    if (gs == 128) pick.template operator()<128>();
  }
#endif
  const ST* scales = w.scales.data_as<const ST>();
  const ST* biases = w.biases.data_as<const ST>();
  const float* P = prep.data();  // (a thread_local named inside the lambda would be each worker's own)
  const int16_t* P16 = xq == 16 ? prep16.data() : nullptr;  // the rounded activations, when the x16 / x8 kernels run
  const int8_t* P8 = xq == 8 ? prep8.data() : nullptr;
  const uint8_t* q = w.q.data_as<const uint8_t>();
  // Rows are cut into blocks of kTileRows streams of S consecutive rows, ~kStreamBytes each; a tile takes
  // row j of every stream, so each stream walks contiguous memory the hardware prefetchers follow (short
  // rows side by side restart them every row).
  constexpr int64_t kStreamBytes = 24 << 10;
  const int64_t S = std::max<int64_t>(1, (kStreamBytes + row_bytes - 1) / row_bytes);
  const int64_t block_rows = kTileRows * S, nblocks = (N + block_rows - 1) / block_rows;
  const int64_t threads = std::min<int64_t>(ThreadPool::global().num_threads(), nblocks);
  // Row m of the 16-bit activations; none when the f32 kernels run (no offset applied to a null pointer).
  auto x16_row = [&](int64_t m) { return P16 ? P16 + m * K : nullptr; };
  auto x8_row = [&](int64_t m) { return P8 ? P8 + m * K : nullptr; };
  // x row m against rows n0, n0 + stride, ... (a whole tile, or one row).
  auto run_rows = [&](int64_t n0, int64_t stride, bool whole, float* res) {
    for (int64_t m = 0; m < M; ++m) {
      const float* xsum = P + m * per_row;
      const GemvArgs a{X + m * K,  xsum + 2 * G, xsum + 2 * G + K / 2, xsum, q + n0 * row_bytes, stride * row_bytes,
                       G,          gs,           stride * G,           row_bytes, x16_row(m),    xsum + G,
                       x8_row(m)};
      (whole ? tile : tile1)(a, scales + n0 * G, biases + n0 * G, res);
      for (int r = 0; r < (whole ? kTileRows : 1); ++r)
        Y[m * N + n0 + r * stride] = res[r] + bias_at(bias, n0 + r * stride);
    }
  };
  // Threads claim blocks from a counter until none is left: they finish within a block of each other, and
  // a thread that starts late (a busy machine) just takes fewer blocks.
  std::atomic<int64_t> next_block{0};
  parallel_for(threads, 1, [&](int64_t, int64_t) {
    float res[kTileRows];
    for (int64_t b; (b = next_block.fetch_add(1, std::memory_order_relaxed)) < nblocks;) {
      const int64_t n0 = b * block_rows, nb = std::min(block_rows, N - n0), s = nb / kTileRows;
      for (int64_t j = 0; j < s; ++j) run_rows(n0 + j, s, true, res);
      for (int64_t r = s * kTileRows; r < nb; ++r) run_rows(n0 + r, 1, false, res);
    }
  });
}

}  // namespace

#if MB_HAVE_X86_SIMD
// dst[i] = s·q + b for the 16 columns c … c + 15 of one group (c a multiple of 16), one FMA each.
template <int BITS>
MB_AVX512_TARGET inline void dequantize16_avx512(const uint8_t* row, int64_t c, float sv, float bv, float* dst) {
  __m128i q8;
  if constexpr (BITS == 8) {
    q8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c));
  } else {  // byte j holds column 2j in its low nibble and 2j + 1 in its high one
    const __m128i packed = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c / 2)), nib = _mm_set1_epi8(0x0F);
    q8 = _mm_unpacklo_epi8(_mm_and_si128(packed, nib), _mm_and_si128(_mm_srli_epi16(packed, 4), nib));
  }
  const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q8));
  _mm512_storeu_ps(dst, _mm512_fmadd_ps(_mm512_set1_ps(sv), q, _mm512_set1_ps(bv)));
}

// Columns [c0, c0 + n) of a row with c0 a multiple of 16 and group_size of 16: whole 16-column steps.
template <int BITS, class ST>
MB_AVX512_TARGET void dequantize_row_avx512(const uint8_t* row, const ST* s, const ST* b, int group_size, int64_t c0,
                                            int64_t n, float* dst) {
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    const int64_t g = (c0 + i) / group_size;
    dequantize16_avx512<BITS>(row, c0 + i, load_f32(s + g), load_f32(b + g), dst + i);
  }
}
#endif

// fn(q, s, b): row r's packed values and its scales / biases as their stored type.
template <class Fn>
void with_row(const ops::QuantizedMatrix& m, int64_t r, Fn&& fn) {
  const int64_t G = m.cols() / m.group_size;
  const uint8_t* row = m.q.data_as<const uint8_t>() + r * m.q.size(1);
  dispatch_float(m.scales.dtype(), [&](auto tag) {
    using ST = decltype(tag);
    fn(row, m.scales.data_as<const ST>() + r * G, m.biases.data_as<const ST>() + r * G);
  });
}

// Columns [c0, c0 + n) of one row from its packed values and its scales / biases.
template <class ST>
void dequantize_row_from(const uint8_t* row, const ST* s, const ST* b, int bits, int group_size, int64_t c0, int64_t n,
                         float* dst) {
  for (int64_t i = 0; i < n;) {
    const int64_t c = c0 + i, g = c / group_size, end = std::min(n, i + (g + 1) * group_size - c);
    const float sv = load_f32(s + g), bv = load_f32(b + g);
    for (; i < end; ++i) dst[i] = sv * float(ops::affine_value(row, c0 + i, bits)) + bv;
  }
}

void dequantize_row(const ops::QuantizedMatrix& m, int64_t r, int64_t c0, int64_t n, float* dst) {
  with_row(m, r, [&](const uint8_t* row, auto s, auto b) { dequantize_row_from(row, s, b, m.bits, m.group_size, c0, n, dst); });
}

void dequantize_row_fast(const ops::QuantizedMatrix& m, int64_t r, int64_t c0, int64_t n, float* dst) {
  int64_t done = 0;
#if MB_HAVE_X86_SIMD
  if ((m.bits == 4 || m.bits == 8) && c0 % 16 == 0 && m.group_size % 16 == 0 && cpu_has_avx512_vnni()) {
    with_row(m, r, [&](const uint8_t* row, auto s, auto b) {
      if (m.bits == 8) dequantize_row_avx512<8>(row, s, b, m.group_size, c0, n, dst);
      else dequantize_row_avx512<4>(row, s, b, m.group_size, c0, n, dst);
    });
    done = n / 16 * 16;
  }
#endif
  if (done < n) dequantize_row(m, r, c0 + done, n - done, dst + done);
}

void linear_quantized_ref(const Tensor& x, const ops::QuantizedMatrix& w, const Tensor* bias, Tensor& out) {
  const int64_t K = x.size(-1), M = K ? x.numel() / K : 0, N = w.rows();
  std::vector<float> row(static_cast<size_t>(K));
  const float* X = x.data_as<const float>();
  float* Y = out.data_as<float>();
  for (int64_t n = 0; n < N; ++n) {
    dequantize_row(w, n, 0, K, row.data());
    for (int64_t m = 0; m < M; ++m) {
      float acc = 0.f;
      for (int64_t k = 0; k < K; ++k) acc += X[m * K + k] * row[size_t(k)];
      Y[m * N + n] = acc + bias_at(bias, n);
    }
  }
}

// Most x rows that take the decode GEMV in passes of 8 rows rather than the GEMM (below).
constexpr int64_t kMaxBytePassRows = 20;

namespace {
// Whether the byte kernel (gemv_quantized_bytes) may serve decode rows with this activation rounding: 8-bit x
// only it offers; 16-bit x unless the 16-bit-lane kernels are chosen (MARKBASE_QGEMV_BYTES=0).
bool byte_kernel_for(int activation_bits) {
  return activation_bits == 8 || (activation_bits == 16 && quant_gemv_bytes_enabled());
}
}  // namespace

void linear_quantized_fast(const Tensor& x, const ops::QuantizedMatrix& w, const Tensor* bias, Tensor& out,
                           const ops::LinearParams& p) {
  const int activation_bits = p.activation_bits;
  const int64_t K = x.size(-1), M = K ? x.numel() / K : 0, N = w.rows();
  if (M == 0 || N == 0) return;
  const float* X = x.data_as<const float>();
  float* Y = out.data_as<float>();
  if (p.row_invariant && M > 1) {
    // Every row as it would come out alone (M = 1, below): a non-finite x takes the f32 kernels, so a row
    // holding one would change the others' kernel; then the rows go one at a time.
    const bool finite = std::all_of(X, X + M * K, [](float v) { return std::isfinite(v); });
    if (!finite) {
      const Tensor x2 = x.reshape({M, K});
      Tensor y2 = out.reshape({M, N});
      for (int64_t m = 0; m < M; ++m) {
        Tensor y_row = y2.slice(0, m, m + 1);
        linear_quantized_fast(x2.slice(0, m, m + 1), w, bias, y_row, p);
      }
      return;
    }
  }
  // The bias as f32 [N] for the kernels that take it so (null without one), converted once per call.
  thread_local std::vector<float> bbuf;
  const float* bf = nullptr;
  if (bias) {
    if (bbuf.size() < size_t(N)) bbuf.resize(size_t(N));
    for (int64_t n = 0; n < N; ++n) bbuf[size_t(n)] = bias_at(bias, n);
    bf = bbuf.data();
  }
  // 8-bit x only from bytes; the 16-bit kernels serve it everywhere else. Under row_invariant any number of
  // rows take the decode kernels (each row's sums are its own, with the rounding of a single row).
  const bool decode_rows = M <= 8 || p.row_invariant;
  if (decode_rows && byte_kernel_for(activation_bits) && gemv_quantized_bytes(M, X, w, bf, Y, activation_bits)) return;
  // 9–20 rows (a larger batched decode step, a short prompt): the byte GEMV in passes of at most 8 rows,
  // each reading the weights again, beats the GEMM, whose weight packing costs about as much as 16 rows of
  // products (Zen 5, one interleaved run: [12288, 1536] 4-bit 12 rows 1.6 against 2.5 ms, 16 rows 2.1 against
  // 2.9; 8-bit 16 rows 2.8 against 3.6; [1536, 6144] 4-bit 16 rows 1.0 against 1.6; about even at 24 rows).
  // x16 as the GEMM rounds it (8-bit x is for decode rows only, ops/quant.h).
  if (!decode_rows && M <= kMaxBytePassRows && activation_bits && byte_kernel_for(16)) {
    const int64_t passes = (M + 7) / 8;
    bool done = true;
    for (int64_t pass = 0, m0 = 0; pass < passes && done; ++pass) {
      const int64_t m1 = M * (pass + 1) / passes;  // balanced passes
      done = gemv_quantized_bytes(m1 - m0, X + m0 * K, w, bf, Y + m0 * N, 16);
      m0 = m1;
    }
    if (done) return;  // else (a non-finite x) the GEMM below rewrites every output
  }
  const bool int16_activations = activation_bits != 0;
  if (!decode_rows) {  // (decode rows: the GEMV, each row group re-reading blocks from L2)
    if (int16_activations && gemm_quantized_x16(M, X, w, bf, Y)) return;
    GemmB B{nullptr, DType::F32, 0, 0};
    B.quant = &w;
    gemm(M, N, K, X, K, B, bf, Y, N);
    return;
  }
  dispatch_float(w.scales.dtype(), [&](auto tag) {
    using ST = decltype(tag);
    if (w.bits == 8) gemv<8, ST>(X, M, w, bias, Y, activation_bits);
    else gemv<4, ST>(X, M, w, bias, Y, activation_bits);
  });
}

void linear_quantized_gathered_ref(const Tensor& x, const ops::QuantizedMatrix& w, const Tensor& ids, Tensor& out) {
  for (int64_t r = 0; r < x.size(0); ++r) {
    Tensor out_row = out.slice(0, r, r + 1);
    linear_quantized_ref(x.slice(0, r, r + 1), w.matrix(id_at(ids, r)), nullptr, out_row);
  }
}

void linear_quantized_gathered_fast(const Tensor& x, const ops::QuantizedMatrix& w, const Tensor& ids, Tensor& out,
                                    const ops::LinearParams& p) {
  const int activation_bits = p.activation_bits;
  const int64_t R = x.size(0);
  if (R == 0 || w.q.size(1) == 0) return;
  // All rows in one call of the byte kernel where linear_quantized_fast would take it for a single row.
  if (byte_kernel_for(activation_bits) &&
      gemv_quantized_bytes_gathered(R, x.data_as<const float>(), w, ids.data_as<const int32_t>(), out.data_as<float>(),
                                    activation_bits))
    return;
  for (int64_t r = 0; r < R; ++r) {
    Tensor out_row = out.slice(0, r, r + 1);
    linear_quantized_fast(x.slice(0, r, r + 1), w.matrix(id_at(ids, r)), nullptr, out_row, p);
  }
}

void embedding_quantized(const ops::QuantizedMatrix& table, const Tensor& ids, Tensor& out, float scale) {
  const int64_t T = ids.size(0), D = table.cols();
  if (T == 0 || D == 0) return;
  float* Y = out.data_as<float>();
  // Each array read a row at a time; from the file when mapped (an MLX-quantized PLE table; embedding_fast).
  auto rows_of = [](const Tensor& t) { return TableRows(t.data(), t.nbytes() / size_t(t.size(0))); };
  const TableRows q = rows_of(table.q), scales = rows_of(table.scales), biases = rows_of(table.biases);
  dispatch_float(table.scales.dtype(), [&](auto tag) {
    using ST = decltype(tag);
    parallel_for(T, std::max<int64_t>(1, kElementwiseGrain / D), [&](int64_t t0, int64_t t1) {
      thread_local std::vector<uint8_t> q_buf, s_buf, b_buf;  // rows read from the file; reused by later calls
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t r = id_at(ids, t);
        float* y = Y + t * D;
        dequantize_row_from(q.row(r, q_buf), reinterpret_cast<const ST*>(scales.row(r, s_buf)),
                            reinterpret_cast<const ST*>(biases.row(r, b_buf)), table.bits, table.group_size, 0, D, y);
        for (int64_t d = 0; d < D; ++d) y[d] *= scale;
      }
    });
  });
}

}  // namespace mb::cpu
