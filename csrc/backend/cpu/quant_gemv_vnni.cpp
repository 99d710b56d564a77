// Decode GEMV with quantized weights on AVX-512 VNNI: the x16 kernels' exact per-group sums Σ q·x16, taken
// from bytes with vpdpbusd (64 unsigned × signed byte products per instruction) instead of 16-bit lanes.
//
// x16 (rounded as round_x16 does, 16 lanes at a time: per group dx = max|x| / 32767) is split once per x row
// into x16 = 256·hi + lo, lo its low byte (0..255, unsigned) and hi = x16 >> 8 (−128..127, signed).
// vpdpbusd multiplies an unsigned byte by a signed one, so
//   4-bit q (0..15 fits either side):  Σ q·x16 = 256·Σ q·hi [q unsigned] + Σ lo·q [q signed]
//   8-bit q (0..255):                  Σ q·lo  = Σ lo·(q − 128) + 128·Σ lo   (q − 128 = q xor 0x80, signed)
// Every sum is exact in int32 (|256·Σ q·hi| ≤ 256·255·128·128 < 2³¹ for a group of 128), so a row's result is
// the x16 kernels' up to the order of the f32 sums. With 8-bit activations (as round_x8, int8_activations; 4-bit
// weights only) x8 takes hi's place and there is no lo: Σ q·x8 in two vpdpbusd per 128 weights. No byte is
// widened (the 16-bit kernels spend a cross-lane widen per 32 weights, which made 4-bit decode compute-bound on
// Zen 4). A thread reads a block of rows as four sequential streams (a tile takes one row from each) and
// prefetches q, scales and biases ahead in every stream.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_round.h"
#include "backend/cpu/simd.h"
#include "core/runtime_switch.h"
#include "core/thread_pool.h"

namespace mb::cpu {

#if MB_HAVE_X86_SIMD
namespace {

constexpr int64_t kStep = 64;          // bytes of q per step (one zmm)
constexpr int64_t kBlockBytes = 384 << 10; // weight bytes a thread claims at a time (192 KiB: 3–10% slower)

// One x row's activations as the kernel reads them (4-bit: even columns, then odd, the nibble order).
struct XRow {
  const uint8_t* lo;    // [K + kStep] low bytes of x16 (zero past K); null for x8
  const int8_t* hi;     // [K + kStep] x16 >> 8, or x8
  const float* dx;      // [G] x ≈ dx[g]·x16 in group g
  const float* xsum;    // [G] Σ x per group (f32, k in order), the biases' factor
  const int32_t* corr;  // 8-bit x16: [steps·16] 128·Σ lo of group g in the lane where g starts; 0 elsewhere
};

// 16 rounded values to the kernel's bytes at k: x16 → lo (its low byte) and hi (x16 >> 8); x8 → hi.
template <bool kX8>
MB_AVX512_TARGET inline void store_bytes(__m512i v, int64_t k, uint8_t* lo, int8_t* hi) {
  if constexpr (kX8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(hi + k), _mm512_cvtepi32_epi8(v));
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + k), _mm512_cvtepi32_epi8(v));  // truncation: the low byte
    _mm_storeu_si128(reinterpret_cast<__m128i*>(hi + k), _mm512_cvtepi32_epi8(_mm512_srai_epi32(v, 8)));
  }
}

// Rounds x [K] (x16, or x8 into hi) and splits it for the kernel, a group at a time (4-bit: even columns to
// the first half, odd to the second, the nibble order); false for a NaN / infinity (nothing usable).
template <bool kX8>
MB_AVX512_TARGET bool prepare_x(const float* x, int64_t K, int gs, int bits, uint8_t* lo, int8_t* hi, float* dx,
                                float* xsum, int32_t* corr) {
  // 8-bit x16: 128·Σ lo of each group, in the lane of the step where it starts (stores come in column order).
  const bool sum_lo = bits == 8 && !kX8;
  if (sum_lo) std::fill(corr, corr + (K + kStep - 1) / kStep * 16, 0);
  __m512i lo_sum = _mm512_setzero_si512();
  const bool ok = round_row<kX8 ? 127 : 32767>(x, K, gs, bits == 4, dx, xsum, [&](__m512i v, int64_t k) MB_AVX512_TARGET {
    store_bytes<kX8>(v, k, lo, hi);
    if (!sum_lo) return;
    lo_sum = _mm512_add_epi32(lo_sum, _mm512_and_si512(v, _mm512_set1_epi32(0xFF)));
    if ((k + 16) % gs == 0) {  // the group's last 16 columns
      const int64_t k0 = k + 16 - gs;
      corr[(k0 / kStep) * 16 + (k0 % kStep) / 4] = 128 * _mm512_reduce_add_epi32(lo_sum);
      lo_sum = _mm512_setzero_si512();
    }
  });
  if (!ok) return false;
  if (!kX8) std::fill(lo + K, lo + K + kStep, uint8_t(0));
  std::fill(hi + K, hi + K + kStep, int8_t(0));
  return true;
}

template <bool kTail>
MB_AVX512_TARGET inline __m512i load_step(const void* p, __mmask64 mask) {
  if constexpr (kTail) return _mm512_maskz_loadu_epi8(mask, p);
  else return _mm512_loadu_si512(p);
}

// 8-bit x16: 128·Σ lo of the groups starting in the step at byte o (lanes where they start), else 0.
template <int BITS, bool kX8>
MB_AVX512_TARGET inline __m512i group_start(const XRow& x, int64_t o) {
  if constexpr (BITS == 8 && !kX8) return _mm512_loadu_si512(x.corr + (o / kStep) * 16);
  else return _mm512_setzero_si512();
}

// The f32 value of the step's exact sums Σ q·x16 = 256·Σ q·hi + Σ lo·q (x8: Σ q·x8, in dh).
template <bool kX8>
MB_AVX512_TARGET inline __m512 sum_of(__m512i dl, __m512i dh) {
  if constexpr (kX8) return _mm512_cvtepi32_ps(dh);
  else return _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(dh, 8), dl));
}

// The step's x bytes at byte o of the row: lo, hi (4-bit: of the even columns, then of the odd ones); x8
// only the hi slots.
template <int BITS, bool kTail, bool kX8>
MB_AVX512_TARGET inline void load_x(const XRow& x, int64_t half, int64_t o, __mmask64 mask, __m512i (&xv)[4]) {
  xv[1] = load_step<kTail>(x.hi + o, mask);
  if constexpr (BITS == 4) xv[3] = load_step<kTail>(x.hi + half + o, mask);
  if constexpr (!kX8) {
    xv[0] = load_step<kTail>(x.lo + o, mask);
    if constexpr (BITS == 4) xv[2] = load_step<kTail>(x.lo + half + o, mask);
  }
}

// The int32 lanes of one step of one row (bytes [o, o + 64) of q, masked in the tail), added into dl (Σ lo·q)
// and dh (Σ q·hi, or Σ q·x8).
template <int BITS, bool kTail, bool kX8>
MB_AVX512_TARGET inline void step(const uint8_t* q, const __m512i (&xv)[4], __mmask64 mask, __m512i& dl, __m512i& dh) {
  const __m512i v = load_step<kTail>(q, mask);
  if constexpr (BITS == 8) {
    static_assert(!kX8, "8-bit activations serve 4-bit weights only");
    dl = _mm512_dpbusd_epi32(dl, xv[0], _mm512_xor_si512(v, _mm512_set1_epi8(char(0x80))));
    dh = _mm512_dpbusd_epi32(dh, v, xv[1]);
  } else {  // byte o holds column 2o in its low nibble (x at o) and 2o + 1 in its high one (x at K/2 + o)
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i qe = _mm512_and_si512(v, low4), qo = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    if constexpr (!kX8) {
      dl = _mm512_dpbusd_epi32(dl, xv[0], qe);
      dl = _mm512_dpbusd_epi32(dl, xv[2], qo);
    }
    dh = _mm512_dpbusd_epi32(dh, qe, xv[1]);
    dh = _mm512_dpbusd_epi32(dh, qo, xv[3]);
  }
}

// The same bytes of rows further on in each stream (a sequential read stays many lines ahead of the
// arithmetic), into L1: on Zen 5 from DRAM, 8-bit [65536, 1536] 49 GB/s against 39–45 with prefetcht2, 4-bit [16384, 6144]
// 39 against 32 (medians of interleaved runs in a high-bandwidth phase; no shape was slower).
MB_AVX512_TARGET inline void prefetch_ahead(const uint8_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }

constexpr int kTileRows = 4;
// How far ahead a tile prefetches q: 6 KiB over its four streams, 1.5 KiB in each (one 8-bit row of 1536,
// two 4-bit ones). Whole rows ahead flooded L1 on long rows (4 x 12 KiB for K = 12288, beside 24 KiB of x):
// on Zen 5 from DRAM, 8-bit [1536, 12288] 33 -> 44 GB/s, [1536, 6144] 38 -> 46 (high-bandwidth phase).
constexpr int64_t kPrefetchBytes = 6 << 10, kStreamAhead = kPrefetchBytes / kTileRows;

// Where a tile's R weight rows are: row r's q bytes at q + r·q_stride, its scales and biases at s / b + r·sb_stride.
// Each row's stream is prefetched kStreamAhead bytes of q (sb_ahead scales) further on as the tile is read.
template <class ST>
struct TileRows {
  const uint8_t* q;
  const ST* s;
  const ST* b;
  int64_t q_stride, sb_stride, sb_ahead;
};

// Prefetches the bytes [p, p + n) into L1, a line at a time.
MB_AVX512_TARGET inline void prefetch_range(const void* p, int64_t n) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(63), end = reinterpret_cast<uintptr_t>(p) + n;
  for (uintptr_t a = first; a < end; a += 64) _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T0);
}

// R weight rows (laid out as t says) against one x row:
// out[r] = Σ_g s[r,g]·dx[g]·Σ_{k∈g} q·x16 + b[r,g]·Σ_{k∈g} x. sdx: scratch [R][G + 16]. The x bytes of a step
// are loaded once for the R rows, whose accumulators are independent chains.
template <int R, int BITS, int GS, bool kX8, class ST>
MB_AVX512_TARGET void tile_dot(const TileRows<ST>& t, int64_t row_bytes, const XRow& x, int64_t K, float* sdx,
                               float* out) {
  constexpr int64_t kGroupBytes = GS * BITS / 8;
  const int64_t G = K / GS, half = K / 2, sdx_stride = G + 16;
  const uint8_t* q = t.q;
  const ST *s = t.s, *b = t.b;
  __m512 acc[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_setzero_ps();
    // The scales and biases too: left to the hardware prefetcher, their misses stalled every tile's start
    // (Zen 5 from DRAM: +4–16% on every shape).
    prefetch_range(s + r * t.sb_stride + t.sb_ahead, G * int64_t(sizeof(ST)));
    prefetch_range(b + r * t.sb_stride + t.sb_ahead, G * int64_t(sizeof(ST)));
  }
  for (int64_t g = 0; g < G; g += 16) {  // s·dx per group, and the biases' Σ b·Σx started in acc
    const __mmask16 mask = G - g >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (G - g)) - 1);
    const __m512 dxv = _mm512_maskz_loadu_ps(mask, x.dx + g), xsv = _mm512_maskz_loadu_ps(mask, x.xsum + g);
    for (int r = 0; r < R; ++r) {
      _mm512_storeu_ps(sdx + r * sdx_stride + g, _mm512_mul_ps(load16_f32_masked(s + r * t.sb_stride + g, mask), dxv));
      acc[r] = _mm512_fmadd_ps(load16_f32_masked(b + r * t.sb_stride + g, mask), xsv, acc[r]);
    }
  }
  __m512i xv[4];
  if constexpr (kGroupBytes >= kStep) {  // a group is 1 or 2 whole steps
    for (int64_t g = 0; g < G; ++g) {
      const int64_t o0 = g * kGroupBytes;
      __m512i dl[R], dh[R];
      for (int r = 0; r < R; ++r) dl[r] = group_start<BITS, kX8>(x, o0), dh[r] = _mm512_setzero_si512();
      for (int64_t o = o0; o < o0 + kGroupBytes; o += kStep) {
        load_x<BITS, false, kX8>(x, half, o, 0, xv);
        for (int r = 0; r < R; ++r) {
          prefetch_ahead(q + r * t.q_stride + kStreamAhead + o);
          step<BITS, false, kX8>(q + r * t.q_stride + o, xv, 0, dl[r], dh[r]);
        }
      }
      for (int r = 0; r < R; ++r)
        acc[r] = _mm512_fmadd_ps(sum_of<kX8>(dl[r], dh[r]), _mm512_set1_ps(sdx[r * sdx_stride + g]), acc[r]);
    }
  } else {  // a step holds 64 / kGroupBytes groups, 16 / that lanes each
    constexpr int kLaneShift = kGroupBytes == 32 ? 3 : kGroupBytes == 16 ? 2 : 1;
    const __m512i lane_group = _mm512_srli_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), kLaneShift);
    auto one_step = [&]<bool kTail>(int64_t o, __mmask64 mask) MB_AVX512_TARGET {
      load_x<BITS, kTail, kX8>(x, half, o, mask, xv);
      for (int r = 0; r < R; ++r) {
        prefetch_ahead(q + r * t.q_stride + kStreamAhead + o);
        __m512i dl = group_start<BITS, kX8>(x, o), dh = _mm512_setzero_si512();
        step<BITS, kTail, kX8>(q + r * t.q_stride + o, xv, mask, dl, dh);
        const __m512 sv = _mm512_permutexvar_ps(lane_group, _mm512_loadu_ps(sdx + r * sdx_stride + o / kGroupBytes));
        acc[r] = _mm512_fmadd_ps(sum_of<kX8>(dl, dh), sv, acc[r]);
      }
    };
    int64_t o = 0;
    for (; o + kStep <= row_bytes; o += kStep) one_step.template operator()<false>(o, 0);
    // Whole groups, fewer than a step's worth: the masked bytes are zero, lanes of no group.
    if (o < row_bytes) one_step.template operator()<true>(o, ~0ull >> (kStep - (row_bytes - o)));
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}


// One matrix of a call and the x rows it multiplies: Y[m·ldy + n] = row n of the matrix · x_m (+ bias[n]).
template <class ST>
struct GemvJob {
  const uint8_t* q;  // [N, row_bytes]
  const ST* scales;  // [N, G]
  const ST* biases;  // [N, G]
  const XRow* xs;    // [M]
  int64_t M;
  float* Y;
};

// Every job's rows, in blocks claimed from one counter by all threads (one wake of the pool for the call).
template <int BITS, int GS, bool kX8, class ST>
void gemv_jobs(const GemvJob<ST>* jobs, int64_t njobs, int64_t N, int64_t K, int64_t ldy, const float* bias) {
  const int64_t G = K / GS, row_bytes = K * BITS / 8;
  // Blocks of consecutive rows: small enough that both threads get several on the smallest calls, large
  // enough that a block is a long sequential read.
  const int64_t threads = ThreadPool::global().num_threads();
  const int64_t block_rows =
      std::max<int64_t>(1, std::min(kBlockBytes / row_bytes, njobs * N / (4 * threads)) / kTileRows) * kTileRows;
  const int64_t blocks_per_job = (N + block_rows - 1) / block_rows, nblocks = njobs * blocks_per_job;
  // A block is read as kTileRows streams: stream r is its rows [r·S, (r + 1)·S), and tile i takes row i of
  // every stream. The hardware prefetchers then follow four long sequential reads; tiles of four adjacent
  // rows (four streams of one row each, restarted every tile) read 15–25% slower from DRAM on Zen 5.
  // Each tile prefetches q kStreamAhead bytes ahead in each stream, and the scales and biases of the rows
  // about kPrefetchBytes of the block on (at least the next).
  const int64_t tile_bytes = kTileRows * row_bytes;
  const int64_t rows_ahead = std::max<int64_t>(1, (kPrefetchBytes + tile_bytes / 2) / tile_bytes);
  std::atomic<int64_t> next_block{0};
  parallel_for(std::min(threads, nblocks), 1, [&](int64_t, int64_t) {
    thread_local std::vector<float> sdx;  // zeros past each row's G scales (lanes of no group multiply 0)
    sdx.assign(size_t(kTileRows * (G + 16)), 0.f);
    float res[kTileRows];
    // The tile of rows n + r·stride, r < R, of job j.
    auto run = [&]<int R>(const GemvJob<ST>& j, int64_t n, int64_t stride) {
      const TileRows<ST> t{j.q + n * row_bytes, j.scales + n * G, j.biases + n * G,
                           stride * row_bytes, stride * G, rows_ahead * G};
      for (int64_t m = 0; m < j.M; ++m) {
        tile_dot<R, BITS, GS, kX8, ST>(t, row_bytes, j.xs[m], K, sdx.data(), res);
        for (int r = 0; r < R; ++r) j.Y[m * ldy + n + r * stride] = res[r] + (bias ? bias[n + r * stride] : 0.f);
      }
    };
    for (int64_t blk; (blk = next_block.fetch_add(1, std::memory_order_relaxed)) < nblocks;) {
      const GemvJob<ST>& j = jobs[blk / blocks_per_job];
      const int64_t n0 = blk % blocks_per_job * block_rows, n1 = std::min(N, n0 + block_rows);
      const int64_t S = (n1 - n0) / kTileRows;  // rows per stream
      for (int64_t i = 0; i < S; ++i) run.template operator()<kTileRows>(j, n0 + i, S);
      for (int64_t n = n0 + S * kTileRows; n < n1; ++n) run.template operator()<1>(j, n, 1);
    }
  });
}

// The x rows rows[m] [K], m < M, rounded and split for the kernel, into buffers of the calling thread; false for
// a non-finite x.
bool prepare_rows(int64_t M, const float* const* rows, int64_t K, int gs, int bits, int x_bits, std::vector<XRow>& xs) {
  const int64_t G = K / gs, steps = (K * bits / 8 + kStep - 1) / kStep, padded = K + kStep;
  thread_local std::vector<uint8_t> lo;
  thread_local std::vector<int8_t> hi;
  thread_local std::vector<float> dx, xsum;
  thread_local std::vector<int32_t> corr;
  lo.resize(size_t(M * padded));  // (unused with x8)
  hi.resize(size_t(M * padded));
  dx.resize(size_t(M * G));
  xsum.resize(size_t(M * G));
  corr.resize(size_t(M * steps * 16));
  xs.resize(size_t(M));
  for (int64_t m = 0; m < M; ++m) {
    uint8_t* lo_m = lo.data() + m * padded;
    int8_t* hi_m = hi.data() + m * padded;
    float *dx_m = dx.data() + m * G, *xsum_m = xsum.data() + m * G;
    int32_t* corr_m = corr.data() + m * steps * 16;
    const bool ok = x_bits == 8 ? prepare_x<true>(rows[m], K, gs, bits, lo_m, hi_m, dx_m, xsum_m, corr_m)
                                : prepare_x<false>(rows[m], K, gs, bits, lo_m, hi_m, dx_m, xsum_m, corr_m);
    if (!ok) return false;
    xs[size_t(m)] = {lo_m, hi_m, dx_m, xsum_m, corr_m};
  }
  return true;
}

// Whether the byte kernel serves w with x rounded to x_bits.
bool bytes_apply(const ops::QuantizedMatrix& w, int x_bits) {
  const int gs = w.group_size;
  return cpu_has_avx512_vnni() && (gs == 32 || gs == 64 || gs == 128) && (x_bits == 16 || (x_bits == 8 && w.bits == 4));
}

// Runs the jobs with the kernel instance for w's format and x_bits.
template <class ST>
void run_jobs(const ops::QuantizedMatrix& w, int x_bits, const GemvJob<ST>* jobs, int64_t njobs, int64_t N, int64_t K,
              int64_t ldy, const float* bias) {
  auto run = [&]<int BITS, int GS>() {
    if constexpr (BITS == 4) {
      if (x_bits == 8) return gemv_jobs<BITS, GS, true, ST>(jobs, njobs, N, K, ldy, bias);
    }
    gemv_jobs<BITS, GS, false, ST>(jobs, njobs, N, K, ldy, bias);
  };
  const int gs = w.group_size;
  if (w.bits == 8) {
    if (gs == 32) run.template operator()<8, 32>();
    else if (gs == 64) run.template operator()<8, 64>();
    else run.template operator()<8, 128>();
  } else {
    if (gs == 32) run.template operator()<4, 32>();
    else if (gs == 64) run.template operator()<4, 64>();
    else run.template operator()<4, 128>();
  }
}

RuntimeSwitch g_bytes{"MARKBASE_QGEMV_BYTES"};

}  // namespace

void set_quant_gemv_bytes(int mode) { g_bytes.set(mode); }

bool quant_gemv_bytes_enabled() { return cpu_has_avx512_vnni() && g_bytes.enabled(); }

bool gemv_quantized_bytes(int64_t M, const float* X, const ops::QuantizedMatrix& w, const float* bias, float* Y,
                          int x_bits) {
  const int64_t N = w.rows(), K = w.cols();
  if (!bytes_apply(w, x_bits) || M <= 0 || N <= 0 || K <= 0) return false;
  thread_local std::vector<const float*> rows;
  rows.resize(size_t(M));
  for (int64_t m = 0; m < M; ++m) rows[size_t(m)] = X + m * K;
  thread_local std::vector<XRow> xs;
  if (!prepare_rows(M, rows.data(), K, w.group_size, w.bits, x_bits, xs)) return false;
  dispatch_float(w.scales.dtype(), [&](auto tag) {
    using ST = decltype(tag);
    const GemvJob<ST> job{w.q.data_as<const uint8_t>(), w.scales.data_as<const ST>(), w.biases.data_as<const ST>(),
                          xs.data(), M, Y};
    run_jobs<ST>(w, x_bits, &job, 1, N, K, N, bias);
  });
  return true;
}

bool gemv_quantized_bytes_gathered(int64_t R, const float* X, const ops::QuantizedMatrix& w, const int32_t* ids,
                                   float* Y, int x_bits) {
  const int64_t E = w.q.size(0), N = w.q.size(1), K = w.scales.size(2) * w.group_size;
  if (!bytes_apply(w, x_bits) || R <= 0 || N <= 0 || K <= 0) return false;
  // A row equal to the one before (a token's row repeated for each of its experts) shares its rounding.
  thread_local std::vector<const float*> distinct;
  thread_local std::vector<int64_t> prepared_as;  // row r's x is distinct[prepared_as[r]]
  distinct.clear();
  prepared_as.resize(size_t(R));
  for (int64_t r = 0; r < R; ++r) {
    const float* x = X + r * K;
    if (r == 0 || std::memcmp(x, x - K, size_t(K) * sizeof(float)) != 0) distinct.push_back(x);
    prepared_as[size_t(r)] = int64_t(distinct.size()) - 1;
  }
  thread_local std::vector<XRow> xs;
  if (!prepare_rows(int64_t(distinct.size()), distinct.data(), K, w.group_size, w.bits, x_bits, xs)) return false;
  const int64_t G = K / w.group_size, row_bytes = w.q.size(2);
  dispatch_float(w.scales.dtype(), [&](auto tag) {
    using ST = decltype(tag);
    thread_local std::vector<GemvJob<ST>> jobs;  // (grows to the largest call, then reused)
    jobs.resize(size_t(R));
    for (int64_t r = 0; r < R; ++r) {
      const int64_t e = std::clamp<int64_t>(ids[r], 0, E - 1);  // (the front door checked the range)
      jobs[size_t(r)] = {w.q.data_as<const uint8_t>() + e * N * row_bytes, w.scales.data_as<const ST>() + e * N * G,
                         w.biases.data_as<const ST>() + e * N * G, xs.data() + prepared_as[size_t(r)], 1, Y + r * N};
    }
    run_jobs<ST>(w, x_bits, jobs.data(), R, N, K, N, nullptr);
  });
  return true;
}

#else

void set_quant_gemv_bytes(int) {}
bool quant_gemv_bytes_enabled() { return false; }
bool gemv_quantized_bytes(int64_t, const float*, const ops::QuantizedMatrix&, const float*, float*, int) {
  return false;
}
bool gemv_quantized_bytes_gathered(int64_t, const float*, const ops::QuantizedMatrix&, const int32_t*, float*, int) {
  return false;
}

#endif

}  // namespace mb::cpu
