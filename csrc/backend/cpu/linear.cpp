// Linear kernels.
//
// Reference: one f32 accumulator per output, k in order.
//
// Fast: x is viewed as [M, K] f32 (converted once if bf16), w as [N, K].
//   prefill (M > 8): the blocked GEMM of backend/cpu/gemm.h.
//   decode  (M <= 8: a step, or a batched step): a GEMV, memory-bound: every weight byte is read from
//     memory once, and the whole game is keeping enough reads in flight. A tile kernel computes an MR x NR patch of dot
//     products (MR x rows against NR w rows, MR·NR independent 8-lane f32 accumulators, FMA), converting w
//     to f32 in registers as it loads. The NR rows of a tile are NR *streams*: the rows are cut into
//     blocks of NR·S rows, stream i of a block being its S consecutive rows [i·S, (i+1)·S), and tile j
//     takes row j of every stream. Each stream then walks ~kStreamBytes of contiguous memory, long enough
//     for the hardware prefetchers to run ahead (NR short rows side by side, re-detected every row, left
//     a core at ~15 GB/s; NR long streams reach ~20 GB/s per core). Blocks are shared out over the pool.
//     On AVX-512 with K <= 4096 the rows are taken one after the other instead (rows_avx512: each thread's
//     block is one sequential stream, 16-lane accumulators): on Zen 4 with 2 MB pages (the kernel maps the
//     checkpoint's page cache that way) one stream per core read up to ~30 GB/s where eight read ~23.
// Summation order differs from the reference (8 lane sums, then the tail) but is fixed: the result does
// not depend on the number of threads, nor, in the GEMV kernels, on the number of x rows or what they hold
// (each (x row, w row) sum has one accumulator layout; more x rows only run more tiles or passes over a
// block). The GEMM sums in another order: LinearParams::row_invariant (a batched decode step) keeps any
// number of rows on the GEMV, so a row comes out as it would alone.
#include "backend/cpu/linear.h"

#include <algorithm>
#include <atomic>
#include <type_traits>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/simd.h"
#include "core/thread_pool.h"

namespace mb::cpu {

namespace {

int64_t rows_of(const Tensor& x) {
  int64_t m = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) m *= x.size(d);
  return m;
}

float load_any(const Tensor& t, int64_t i) {
  return dispatch_float(t.dtype(), [&](auto tag) { return load_f32(t.data_as<const decltype(tag)>() + i); });
}

}  // namespace

void linear_ref(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  const int64_t M = rows_of(x), K = x.size(-1), N = w.size(0);
  dispatch_float(x.dtype(), [&](auto xtag) {
    using XT = decltype(xtag);
    dispatch_float(w.dtype(), [&](auto wtag) {
      using WT = decltype(wtag);
      const XT* xs = x.data_as<const XT>();
      const WT* ws = w.data_as<const WT>();
      XT* ys = out.data_as<XT>();
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          float acc = 0.f;
          for (int64_t k = 0; k < K; ++k) acc += load_f32(xs + m * K + k) * load_f32(ws + n * K + k);
          if (bias) acc += load_any(*bias, n);
          store_f32(ys + m * N + n, acc);
        }
    });
  });
}

namespace {

// Largest x tile height, and the w rows (streams) per tile for each height: MR·NR accumulators plus the
// operand registers fit in the 16 ymm registers of AVX2.
constexpr int kMaxMR = 4;
constexpr int kNR[kMaxMR + 1] = {0, 8, 4, 4, 3};
// x rows that still take the GEMV path (a batched decode step): each block of w rows is read from memory
// once, for the first kMaxMR rows, and from L2 for the next (a block is ~100 KB). Past this the GEMM wins.
constexpr int64_t kMaxGemvRows = 8;
// Contiguous bytes each weight stream walks before the block ends (measured on Zen 2: 3 KB streams
// ~30 GB/s over two cores, >= 16 KB ~40 GB/s).
constexpr int64_t kStreamBytes = 24 << 10;
// Multiply-adds per parallel chunk below which waking another thread costs more than it saves.
constexpr int64_t kMinMacsPerChunk = 1 << 17;

// res[m * NR + r] = Σ_k x[m·ldx + k] · w[r·ldw + k] for an MR x NR tile; w is storage type WT.
using TileFn = void (*)(const float* x, int64_t ldx, const void* w, int64_t ldw, int64_t K, float* res);
// dst[i] = f32(src[i]) for i < n.
using ConvertFn = void (*)(const void* src, float* dst, int64_t n);

struct Kernels {
  TileFn wide[kMaxMR + 1];    // MR x kNR[MR]
  TileFn narrow[kMaxMR + 1];  // MR x 1, for the rows left over at the end of a block
  ConvertFn convert;
};

// Portable tile: 8 explicit lanes per accumulator, a pattern compilers vectorise without reassociation.
template <int MR, int NR, class WT>
void tile_portable(const float* x, int64_t ldx, const void* wv, int64_t ldw, int64_t K, float* res) {
  const WT* w = static_cast<const WT*>(wv);
  constexpr int L = 8;
  float acc[MR][NR][L] = {};
  int64_t k = 0;
  for (; k + L <= K; k += L)
    for (int r = 0; r < NR; ++r) {
      float wl[L];
      for (int j = 0; j < L; ++j) wl[j] = load_f32(w + r * ldw + k + j);
      for (int m = 0; m < MR; ++m)
        for (int j = 0; j < L; ++j) acc[m][r][j] += x[m * ldx + k + j] * wl[j];
    }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) {
      float s = 0.f;
      for (int j = 0; j < L; ++j) s += acc[m][r][j];
      for (int64_t kk = k; kk < K; ++kk) s += x[m * ldx + kk] * load_f32(w + r * ldw + kk);
      res[m * NR + r] = s;
    }
}

template <class WT>
void convert_portable(const void* src, float* dst, int64_t n) {
  const WT* s = static_cast<const WT*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = load_f32(s + i);
}

template <class WT>
Kernels portable_kernels() {
  return {{nullptr, tile_portable<1, kNR[1], WT>, tile_portable<2, kNR[2], WT>, tile_portable<3, kNR[3], WT>,
           tile_portable<4, kNR[4], WT>},
          {nullptr, tile_portable<1, 1, WT>, tile_portable<2, 1, WT>, tile_portable<3, 1, WT>, tile_portable<4, 1, WT>},
          convert_portable<WT>};
}

#if MB_HAVE_X86_SIMD

template <int MR, int NR, class WT>
MB_AVX2_TARGET void tile_avx2(const float* x, int64_t ldx, const void* wv, int64_t ldw, int64_t K, float* res) {
  const WT* w = static_cast<const WT*>(wv);
  __m256 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) acc[m][r] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    if constexpr (MR >= NR) {
      // Hold the NR w vectors, stream the x rows.
      __m256 wl[NR];
      for (int r = 0; r < NR; ++r) wl[r] = load8_f32(w + r * ldw + k);
      for (int m = 0; m < MR; ++m) {
        const __m256 xv = _mm256_loadu_ps(x + m * ldx + k);
        for (int r = 0; r < NR; ++r) acc[m][r] = _mm256_fmadd_ps(xv, wl[r], acc[m][r]);
      }
    } else {
      // Hold the MR x vectors, stream the w rows.
      __m256 xl[MR];
      for (int m = 0; m < MR; ++m) xl[m] = _mm256_loadu_ps(x + m * ldx + k);
      for (int r = 0; r < NR; ++r) {
        const __m256 wr = load8_f32(w + r * ldw + k);
        for (int m = 0; m < MR; ++m) acc[m][r] = _mm256_fmadd_ps(xl[m], wr, acc[m][r]);
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) {
      float s = hsum8(acc[m][r]);
      for (int64_t kk = k; kk < K; ++kk) s += x[m * ldx + kk] * load_f32(w + r * ldw + kk);
      res[m * NR + r] = s;
    }
}

template <class WT>
MB_AVX2_TARGET void convert_avx2(const void* src, float* dst, int64_t n) {
  const WT* s = static_cast<const WT*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8_f32(s + i));
  for (; i < n; ++i) dst[i] = load_f32(s + i);
}

template <class WT>
Kernels avx2_kernels() {
  return {{nullptr, tile_avx2<1, kNR[1], WT>, tile_avx2<2, kNR[2], WT>, tile_avx2<3, kNR[3], WT>, tile_avx2<4, kNR[4], WT>},
          {nullptr, tile_avx2<1, 1, WT>, tile_avx2<2, 1, WT>, tile_avx2<3, 1, WT>, tile_avx2<4, 1, WT>},
          convert_avx2<WT>};
}

#endif  // MB_HAVE_X86_SIMD

template <class WT>
const Kernels& kernels_for() {
  static const Kernels ks = [] {
#if MB_HAVE_X86_SIMD
    if (cpu_has_avx2()) return avx2_kernels<WT>();
#endif
    return portable_kernels<WT>();
  }();
  return ks;
}

struct Problem {
  const float* x;      // [M, K] f32
  int64_t M, K, N;
  const float* bias;   // [N] f32, or null
  void* out;           // [M, N] of out_dtype
  DType out_dtype;
};

// out[m0 + i, n0 + j·stride] = res[i·nr + j] (+ bias), rounded once to out's dtype.
void store_tile(const Problem& p, int64_t m0, int mr, int64_t n0, int nr, int64_t stride, const float* res) {
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      const int64_t n = n0 + j * stride;
      float v = res[i * nr + j];
      if (p.bias) v += p.bias[n];
      const int64_t idx = (m0 + i) * p.N + n;
      if (p.out_dtype == DType::F32) static_cast<float*>(p.out)[idx] = v;
      else store_f32(static_cast<bf16_t*>(p.out) + idx, v);
    }
}

// Every x row against the nb w rows [n0, n0 + nb) at `w` (row stride K): NR streams of s = nb / NR rows
// (the tiles), then the nb mod NR rows left over one at a time.
template <class WT>
void run_block(const Problem& p, const Kernels& ks, const WT* w, int64_t n0, int64_t nb) {
  float res[kMaxMR * 8];
  for (int64_t m0 = 0; m0 < p.M; m0 += kMaxMR) {
    const int mr = int(std::min<int64_t>(kMaxMR, p.M - m0));
    const int nr = kNR[mr];
    const int64_t s = nb / nr;
    const float* xt = p.x + m0 * p.K;
    for (int64_t j = 0; j < s; ++j) {
      ks.wide[mr](xt, p.K, w + j * p.K, s * p.K, p.K, res);
      store_tile(p, m0, mr, n0 + j, nr, s, res);
    }
    for (int64_t r = s * nr; r < nb; ++r) {
      ks.narrow[mr](xt, p.K, w + r * p.K, p.K, p.K, res);
      store_tile(p, m0, mr, n0 + r, 1, 1, res);
    }
  }
}

#if MB_HAVE_X86_SIMD

// res[m · rows + r] = Σ_k x[m·ldx + k] · w[r·K + k] for MR x rows and `rows` consecutive w rows, one row after
// the other: each thread's weights are one sequential stream (on Zen 4 with the checkpoint on 2 MB pages, one
// stream per core reads ~30 GB/s where eight interleaved ones read ~23). kRowsU·16 lanes per accumulator row
// whatever MR, so a row's sum is the same whichever pass and pass size it is computed in.
constexpr int kRowsU = 4;
constexpr int kRowsMaxMR = 4;  // x rows per pass: MR·kRowsU accumulators and the w vectors fit 32 zmm
template <int MR, class WT>
MB_AVX512_TARGET void rows_avx512(const float* x, int64_t ldx, const WT* w, int64_t K, int64_t rows, float* res) {
  constexpr int U = kRowsU;
  for (int64_t r = 0; r < rows; ++r) {
    const WT* wr = w + r * K;
    __m512 acc[MR][U];
    for (int m = 0; m < MR; ++m)
      for (int u = 0; u < U; ++u) acc[m][u] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 * U <= K; k += 16 * U) {
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) {
        // 2 KB ahead in the stream, as gemv_rows in bf16_gemm.cpp (one stream per thread needs the help).
        _mm_prefetch(reinterpret_cast<const char*>(wr + k + 16 * u) + 2048, _MM_HINT_T0);
        const __m512 wv = load16_f32(wr + k + 16 * u);
#pragma GCC unroll 4
        for (int m = 0; m < MR; ++m) acc[m][u] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + m * ldx + k + 16 * u), acc[m][u]);
      }
    }
    for (; k < K; k += 16) {  // the tail, 16 (or fewer, masked) at a time
      const __mmask16 mask = K - k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (K - k)) - 1);
      const __m512 wv = load16_f32_masked(wr + k, mask);
      for (int m = 0; m < MR; ++m) acc[m][0] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(mask, x + m * ldx + k), acc[m][0]);
    }
    for (int m = 0; m < MR; ++m) {
      __m512 s = acc[m][0];
      for (int u = 1; u < U; ++u) s = _mm512_add_ps(s, acc[m][u]);
      res[m * rows + r] = _mm512_reduce_add_ps(s);
    }
  }
}

template <class WT>
using RowsFn = void (*)(const float*, int64_t, const WT*, int64_t, int64_t, float*);
template <class WT>
RowsFn<WT> rows_kernel(int64_t mr) {
  static const RowsFn<WT> fns[kRowsMaxMR + 1] = {nullptr, rows_avx512<1, WT>, rows_avx512<2, WT>, rows_avx512<3, WT>,
                                                 rows_avx512<4, WT>};
  return fns[mr];
}

// Weight bytes per claimed block of rows: long enough that a block is mostly streaming, short enough that the
// two threads finish within a block of each other.
constexpr int64_t kRowBlockBytes = 192 << 10;
constexpr int64_t kMaxBlockRows = 1024;
// Longer rows keep the streams kernel: each row would re-read all of x (> 16 KB) from L2, slower than its
// weights arrive (measured: the [1536, 12288] down projection).
constexpr int64_t kMaxRowsK = 4096;

template <class WT>
void run_rows_avx512(const Problem& p, const WT* w) {
  const int64_t row_bytes = std::max<int64_t>(1, p.K * int64_t(sizeof(WT)));
  const int64_t block_rows = std::clamp<int64_t>(kRowBlockBytes / row_bytes, 1, kMaxBlockRows);
  const int64_t nblocks = (p.N + block_rows - 1) / block_rows;
  const int64_t macs_per_block = std::max<int64_t>(1, block_rows * p.K * p.M);
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerChunk / macs_per_block);
  const int64_t threads = std::min<int64_t>(ThreadPool::global().num_threads(), (nblocks + grain - 1) / grain);
  std::atomic<int64_t> next{0};
  parallel_for(threads, 1, [&](int64_t, int64_t) {
    float res[kRowsMaxMR * kMaxBlockRows];
    for (int64_t b; (b = next.fetch_add(1, std::memory_order_relaxed)) < nblocks;) {
      const int64_t n0 = b * block_rows, nb = std::min(block_rows, p.N - n0);
      // x rows in passes of at most kRowsMaxMR over the block (from L2 after the first pass).
      for (int64_t m0 = 0; m0 < p.M; m0 += kRowsMaxMR) {
        const int mr = int(std::min<int64_t>(kRowsMaxMR, p.M - m0));
        rows_kernel<WT>(mr)(p.x + m0 * p.K, p.K, w + n0 * p.K, p.K, nb, res);
        store_tile(p, m0, mr, n0, int(nb), 1, res);
      }
    }
  });
}
#endif  // MB_HAVE_X86_SIMD

template <class WT>
void run_typed(const Problem& p, const WT* w) {
#if MB_HAVE_X86_SIMD
  if (cpu_has_avx512_vnni() && p.K <= kMaxRowsK) return run_rows_avx512(p, w);
#endif
  const Kernels& ks = kernels_for<WT>();
  // A block: NR streams of S rows, each stream ~kStreamBytes (each group of <= 4 rows of x shares one NR).
  const int64_t nr = kNR[std::min<int64_t>(p.M, kMaxMR)];
  const int64_t row_bytes = std::max<int64_t>(1, p.K * int64_t(sizeof(WT)));
  const int64_t block_rows = nr * std::max<int64_t>(1, (kStreamBytes + row_bytes - 1) / row_bytes);
  const int64_t nblocks = (p.N + block_rows - 1) / block_rows;
  const int64_t macs_per_block = std::max<int64_t>(1, block_rows * p.K * p.M);
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerChunk / macs_per_block);
  // Every thread claims one block at a time until none is left: the threads finish within a block of
  // each other (fixed chunks left one core idle up to a chunk, ~1/8 of the op), and a thread that starts
  // late (a busy machine) just takes fewer blocks.
  const int64_t threads = std::min<int64_t>(ThreadPool::global().num_threads(), (nblocks + grain - 1) / grain);
  std::atomic<int64_t> next{0};
  parallel_for(threads, 1, [&](int64_t, int64_t) {
    for (int64_t b; (b = next.fetch_add(1, std::memory_order_relaxed)) < nblocks;) {
      const int64_t n0 = b * block_rows, nb = std::min(block_rows, p.N - n0);
      run_block(p, ks, w + n0 * p.K, n0, nb);
    }
  });
}

}  // namespace

void linear_fast(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out, const ops::LinearParams& lp) {
  const bool bf16_products = lp.bf16_products;
  const int64_t M = rows_of(x), K = x.size(-1), N = w.size(0);
  if (M == 0 || N == 0) return;
  // Scratch grows to the largest call and is then reused: no allocation per call in steady state.
  thread_local std::vector<float> xbuf, bbuf;
  const float* xf = x.data_as<const float>();
  if (x.dtype() == DType::BF16) {
    if (xbuf.size() < size_t(M * K)) xbuf.resize(size_t(M * K));
    kernels_for<bf16_t>().convert(x.data(), xbuf.data(), M * K);
    xf = xbuf.data();
  }
  const float* bf = nullptr;
  if (bias) {
    if (bbuf.size() < size_t(N)) bbuf.resize(size_t(N));
    for (int64_t n = 0; n < N; ++n) bbuf[size_t(n)] = load_any(*bias, n);
    bf = bbuf.data();
  }
  if (M > kMaxGemvRows && !lp.row_invariant) {
    // Prefill: the blocked GEMM (backend/cpu/gemm.h), into out directly when it is f32.
    thread_local std::vector<float> cbuf;
    float* c = out.data_as<float>();
    if (out.dtype() != DType::F32) {
      if (cbuf.size() < size_t(M * N)) cbuf.resize(size_t(M * N));
      c = cbuf.data();
    }
    const bool bf16_done = bf16_products && w.dtype() == DType::BF16 &&
                           gemm_bf16_products(M, N, K, xf, w.data_as<const bf16_t>(), bf, c);
    if (!bf16_done) gemm(M, N, K, xf, K, GemmB{w.data(), w.dtype(), K, 1}, bf, c, N);
    if (out.dtype() != DType::F32)
      for (int64_t i = 0; i < M * N; ++i) store_f32(out.data_as<bf16_t>() + i, c[i]);
    return;
  }
  // Decode rows with bf16 products: the GEMM's rounding of x and its vdpbf16ps, so a token gets the same
  // products whichever path (prefill, decode, batch) it takes, and the same sums in any decode step.
  if (bf16_products && w.dtype() == DType::BF16 && x.dtype() == DType::F32 &&
      gemv_bf16_products(M, N, K, xf, w.data_as<const bf16_t>(), bf, out.data_as<float>()))
    return;
  const Problem p{xf, M, K, N, bf, out.data(), out.dtype()};
  dispatch_float(w.dtype(), [&](auto tag) { run_typed(p, w.data_as<const decltype(tag)>()); });
}

}  // namespace mb::cpu
