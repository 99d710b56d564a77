// Prefill GEMM with bf16 weights as bf16 products (AVX512_BF16; AMX tiles where granted: bf16_gemm_amx.cpp):
// Y[m, n] = Σ_k bf16(x[m, k]) · w[n, k] (+ bias[n]).
//
// x is rounded to bf16 (nearest-even) once; the weights are bf16 already. vdpbf16ps multiplies two bf16
// pairs per f32 lane (each product exact in f32) and adds them into the f32 accumulator, 32 multiply-adds
// per instruction: on AMD Zen 4 / Zen 5 twice the rate of an f32 FMA (bench/isa_probe.py), on Intel half
// of it. The accumulator runs over k pair by pair in order, so the result does not depend on the blocking
// or the thread count. Tiles of 12 rows × 32 columns: 24 zmm accumulators.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/bf16_pack.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/simd.h"
#include "core/runtime_switch.h"
#include "core/thread_pool.h"

namespace mb::cpu {

#if MB_HAVE_X86_SIMD
namespace {

constexpr int kMR = 12, kNR = kBf16PanelRows;  // rows of x, weight rows (columns of Y) per tile
constexpr int64_t kKC = kBf16SliceK;            // k per slice (256 pairs): a 32 KB weight panel

// x rounded and packed once: per k slice, slivers of kMR rows holding each k pair as one int32
// (bf16(x[k]) | bf16(x[k + 1]) << 16) for rows 0..11 in turn. Slice k0 starts at (k0 / 2) · padded_m.
struct PackedX {
  std::vector<int32_t> pairs;
  int64_t padded_m = 0;
  const int32_t* sliver(int64_t k0, int64_t kc, int64_t first_row) const {
    return pairs.data() + (k0 / 2) * padded_m + (first_row / kMR) * (kc / 2) * kMR;
  }
};

// Rows [s·kMR, s·kMR + kMR) of x, k slice [k0, k0 + kc), rounded and interleaved into the sliver layout.
MB_BF16_TARGET void pack_x_sliver(const float* X, int64_t M, int64_t K, int64_t s, int64_t k0, int64_t kc,
                                  int32_t* dst) {
  alignas(64) uint16_t row[kKC];
  for (int i = 0; i < kMR; ++i) {
    const int64_t m = s * kMR + i;
    if (m >= M) {
      for (int64_t kp = 0; kp < kc / 2; ++kp) dst[kp * kMR + i] = 0;
      continue;
    }
    round_row_bf16(X + m * K + k0, kc, kc, row);
    const uint32_t* pairs = reinterpret_cast<const uint32_t*>(row);
    for (int64_t kp = 0; kp < kc / 2; ++kp) dst[kp * kMR + i] = int32_t(pairs[kp]);
  }
}

// One 12 × 32 tile over kp pairs: c (row stride ldc) = (accumulate ? c : 0) + Σ pairs. ap: the sliver's
// pairs [kp][12]; bp: the panel's pairs [kp][32].
MB_BF16_TARGET void tile_bf16(int64_t pairs, const int32_t* ap, const int32_t* bp, float* c, int64_t ldc,
                              bool accumulate) {
  __m512 acc[2 * kMR];
#pragma GCC unroll 24
  for (int t = 0; t < 2 * kMR; ++t)
    acc[t] = accumulate ? _mm512_loadu_ps(c + (t / 2) * ldc + (t % 2) * 16) : _mm512_setzero_ps();
  for (int64_t kp = 0; kp < pairs; ++kp) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + kp * kNR);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + kp * kNR + 16);
    __builtin_prefetch(bp + (kp + 8) * kNR);
#pragma GCC unroll 12
    for (int i = 0; i < kMR; ++i) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32(ap[kp * kMR + i]);
      acc[2 * i] = _mm512_dpbf16_ps(acc[2 * i], a, b0);
      acc[2 * i + 1] = _mm512_dpbf16_ps(acc[2 * i + 1], a, b1);
    }
  }
#pragma GCC unroll 24
  for (int t = 0; t < 2 * kMR; ++t) _mm512_storeu_ps(c + (t / 2) * ldc + (t % 2) * 16, acc[t]);
}

// 12 × 32 tiles over the shared panel loop: the sliver of `row` holds the slice's pairs of its 12 rows.
struct SliverTiles {
  static constexpr int64_t kRows = kMR, kSliceK = kKC, kTaskPanels = 6;
  const PackedX& px;
  int64_t padded_k(int64_t kc) const { return kc; }
  void tile(int64_t k0, int64_t kc, int64_t row, const int32_t* panel, float* c, int64_t ldc, bool accumulate) const {
    tile_bf16(kc / 2, px.sliver(k0, kc, row), panel, c, ldc, accumulate);
  }
  void begin_thread() const {}
  void end_thread() const {}
};

}  // namespace

bool bf16_products_supported() {
  static const bool has = [] {
    __builtin_cpu_init();
    return cpu_has_avx512_vnni() && __builtin_cpu_supports("avx512bf16");
  }();
  return has;
}

namespace {
RuntimeSwitch g_bf16_products{"MARKBASE_BF16_PRODUCTS"};
}

void set_bf16_products(int mode) { g_bf16_products.set(mode); }

bool bf16_products_enabled() {
  // vdpbf16ps does twice the multiply-adds of an f32 FMA on AMD (Zen 4 / 5), half of it on Intel.
  // With AMX (bf16_gemm_amx.cpp) the GEMM's tiles do 16× the f32 FMA's multiply-adds on Intel too.
  static const bool on_amd = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") != 0;
  }();
  return bf16_products_supported() && g_bf16_products.enabled(on_amd || amx_bf16_enabled());
}

namespace {

// Decode rows against `rows` consecutive weight rows, one row after the other (each thread's block is one
// sequential stream): res[m · rows + r] = Σ over k pairs of bf16 products, vdpbf16ps, 32 weights per
// instruction — a quarter of the f32 GEMV's vector work per byte, so the core keeps up with the memory.
// kGemvU accumulators per x row whatever MR: a row's sum does not depend on the pass it is computed in.
constexpr int64_t kGemvPrefetchBytes = 2048;  // (512: +10%, 4096 / 8192: no better on the Xeon VM)
constexpr int kGemvU = 4;
// x rows per pass. 2: on Zen 5 (one [32768, 1536] matrix, best of interleaved runs on a busy machine) 4 rows
// took 2.27-2.46 ms as two passes of 2 against 2.74-3.08 as one pass of 4 (the former 4 x 1 accumulators:
// 2.40-2.64), 8 rows 3.7-4.2 against 3.8-4.3 (4.1-4.6); 1 and 2 rows as before.
constexpr int kGemvMaxMR = 2;

template <int MR>
MB_BF16_TARGET void gemv_rows(const uint16_t* xb, int64_t ldx, const bf16_t* W, int64_t K, int64_t rows, float* res) {
  constexpr int U = kGemvU;
  const int64_t pairs = K / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* w = reinterpret_cast<const int32_t*>(W + r * K);
    __m512 acc[MR][U];
    for (int m = 0; m < MR; ++m)
      for (int u = 0; u < U; ++u) acc[m][u] = _mm512_setzero_ps();
    int64_t p = 0;
    for (; p + 16 * U <= pairs; p += 16 * U) {
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) {
        // 2 KB ahead in the stream (into the next rows at a row's end; past the matrix a prefetch is a no-op):
        // one stream per thread is too few for the hardware prefetchers alone (20 -> 24 GB/s on 1536 x 6144).
        _mm_prefetch(reinterpret_cast<const char*>(w + p + 16 * u) + kGemvPrefetchBytes, _MM_HINT_T0);
        const __m512bh wv = (__m512bh)_mm512_loadu_si512(w + p + 16 * u);
#pragma GCC unroll 4
        for (int m = 0; m < MR; ++m)
          acc[m][u] = _mm512_dpbf16_ps(acc[m][u], wv, (__m512bh)_mm512_loadu_si512(xb + m * ldx + 2 * (p + 16 * u)));
      }
    }
    for (; p < pairs; p += 16) {  // the tail: up to 16 pairs, masked (x is zero-padded past K)
      const __mmask16 mask = pairs - p >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (pairs - p)) - 1);
      const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi32(mask, w + p);
      for (int m = 0; m < MR; ++m)
        acc[m][0] = _mm512_dpbf16_ps(acc[m][0], wv, (__m512bh)_mm512_maskz_loadu_epi32(mask, xb + m * ldx + 2 * p));
    }
    for (int m = 0; m < MR; ++m) {
      __m512 s = acc[m][0];
      for (int u = 1; u < U; ++u) s = _mm512_add_ps(s, acc[m][u]);
      res[m * rows + r] = _mm512_reduce_add_ps(s);
    }
  }
}

using GemvRowsFn = void (*)(const uint16_t*, int64_t, const bf16_t*, int64_t, int64_t, float*);
constexpr GemvRowsFn kGemvRows[kGemvMaxMR + 1] = {nullptr, gemv_rows<1>, gemv_rows<2>};
constexpr int64_t kGemvBlockBytes = 192 << 10;  // weight bytes per claimed block of rows
constexpr int64_t kGemvMaxBlockRows = 1024;

}  // namespace

bool gemv_bf16_products(int64_t M, int64_t N, int64_t K, const float* X, const bf16_t* W, const float* bias,
                        float* Y) {
  if (!bf16_products_enabled() || M < 1 || N <= 0 || K <= 0 || K % 2) return false;
  const int64_t ldx = (K + 31) / 32 * 32;  // x rows rounded to bf16, zero-padded to whole vectors
  thread_local std::vector<uint16_t> xb_store;
  if (xb_store.size() < size_t(M * ldx)) xb_store.resize(size_t(M * ldx));
  uint16_t* const xb = xb_store.data();
  for (int64_t m = 0; m < M; ++m) round_row_bf16(X + m * K, K, ldx, xb + m * ldx);
  const int64_t block_rows = std::clamp<int64_t>(kGemvBlockBytes / (2 * K), 1, kGemvMaxBlockRows);
  const int64_t nblocks = (N + block_rows - 1) / block_rows;
  const int64_t threads = std::min<int64_t>(ThreadPool::global().num_threads(), nblocks);
  std::atomic<int64_t> next{0};
  parallel_for(threads, 1, [&](int64_t, int64_t) {
    float res[kGemvMaxMR * kGemvMaxBlockRows];
    for (int64_t b; (b = next.fetch_add(1, std::memory_order_relaxed)) < nblocks;) {
      const int64_t n0 = b * block_rows, nb = std::min(block_rows, N - n0);
      // x rows in passes of at most kGemvMaxMR over the block (from L2 after the first pass).
      for (int64_t m0 = 0; m0 < M; m0 += kGemvMaxMR) {
        const int64_t mr = std::min<int64_t>(kGemvMaxMR, M - m0);
        kGemvRows[mr](xb + m0 * ldx, ldx, W + n0 * K, K, nb, res);
        for (int64_t m = 0; m < mr; ++m)
          for (int64_t r = 0; r < nb; ++r)
            Y[(m0 + m) * N + n0 + r] = res[m * nb + r] + (bias ? bias[n0 + r] : 0.f);
      }
    }
  });
  return true;
}

bool gemm_bf16_products(int64_t M, int64_t N, int64_t K, const float* X, const bf16_t* W, const float* bias,
                        float* Y) {
  if (!bf16_products_enabled() || M <= 0 || N <= 0 || K <= 0 || K % 2) return false;
  if (gemm_bf16_amx(M, N, K, X, W, bias, Y)) return true;
  const int64_t slivers = (M + kMR - 1) / kMR, slices = (K + kKC - 1) / kKC;
  thread_local PackedX px_store;  // the calling thread's; workers read it through `px`
  PackedX& px = px_store;
  px.padded_m = slivers * kMR;
  if (px.pairs.size() < size_t(px.padded_m * K / 2)) px.pairs.resize(size_t(px.padded_m * K / 2));
  parallel_for(slivers * slices, 4, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t s = i % slivers, k0 = (i / slivers) * kKC, kc = std::min(kKC, K - k0);
      pack_x_sliver(X, M, K, s, k0, kc, const_cast<int32_t*>(px.sliver(k0, kc, s * kMR)));
    }
  });
  run_panel_gemm(SliverTiles{px}, M, N, K, W, bias, Y);
  return true;
}

#else

bool bf16_products_supported() { return false; }
void set_bf16_products(int) {}
bool bf16_products_enabled() { return false; }
bool gemm_bf16_products(int64_t, int64_t, int64_t, const float*, const bf16_t*, const float*, float*) { return false; }
bool gemv_bf16_products(int64_t, int64_t, int64_t, const float*, const bf16_t*, const float*, float*) { return false; }

#endif

}  // namespace mb::cpu
