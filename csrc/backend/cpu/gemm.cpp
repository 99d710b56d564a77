#include "backend/cpu/gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/simd.h"
#include "core/thread_pool.h"

namespace mb::cpu {

namespace {

// Tile geometry: the micro-kernel of this CPU (micro() below) computes an mr × nr block of C; AVX2 6 × 16
// (twelve ymm accumulators), AVX-512 12 × 32 (twenty-four zmm). Packed A slivers and B panels follow it.
constexpr int kMaxMR = 12, kMaxNR = 32;
constexpr int64_t kKC = 256;  // k per slice: an mr × KC sliver of A and a KC × nr panel of B stay in L1 / L2
constexpr int64_t kNC = 192;  // columns per task (a multiple of every nr): the task's packed B slice is 192 KB
constexpr int64_t kMC = 576;  // rows per task (a multiple of every mr): B is packed once per task

// c[i·ldc + j] (+)= Σ_k ap[k·mr + i] · bp[k·nr + j] for i < mr, j < nr; `accumulate`: start from c.
using MicroFn = void (*)(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, bool accumulate);
struct Micro {
  MicroFn fn;
  int mr, nr;
  const char* name;
};

template <int MR, int NR>
void micro_portable(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, bool accumulate) {
  float acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = accumulate ? c[i * ldc + j] : 0.f;
  for (int64_t k = 0; k < kc; ++k)
    for (int i = 0; i < MR; ++i) {
      const float av = ap[k * MR + i];
      for (int j = 0; j < NR; ++j) acc[i][j] += av * bp[k * NR + j];
    }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) c[i * ldc + j] = acc[i][j];
}

#if MB_HAVE_X86_SIMD
// The 6 × 16 tile in twelve named accumulators (GCC keeps an array of vectors on the stack in the loop).
// ap: the A sliver packed k-major (ap[k·kMR + i]), so the six broadcasts of a step read one cache line.
MB_AVX2_TARGET void micro_avx2(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, bool accumulate) {
  constexpr int kMR = 6, kNR = 16;
  __m256 c0l, c0h, c1l, c1h, c2l, c2h, c3l, c3h, c4l, c4h, c5l, c5h;
  if (accumulate) {
    c0l = _mm256_loadu_ps(c), c0h = _mm256_loadu_ps(c + 8);
    c1l = _mm256_loadu_ps(c + ldc), c1h = _mm256_loadu_ps(c + ldc + 8);
    c2l = _mm256_loadu_ps(c + 2 * ldc), c2h = _mm256_loadu_ps(c + 2 * ldc + 8);
    c3l = _mm256_loadu_ps(c + 3 * ldc), c3h = _mm256_loadu_ps(c + 3 * ldc + 8);
    c4l = _mm256_loadu_ps(c + 4 * ldc), c4h = _mm256_loadu_ps(c + 4 * ldc + 8);
    c5l = _mm256_loadu_ps(c + 5 * ldc), c5h = _mm256_loadu_ps(c + 5 * ldc + 8);
  } else {
    c0l = c0h = c1l = c1h = c2l = c2h = c3l = c3h = c4l = c4h = c5l = c5h = _mm256_setzero_ps();
  }
#define MB_GEMM_STEP(K)                                                                                   \
  {                                                                                                       \
    const __m256 b0 = _mm256_loadu_ps(bp + (K) * kNR), b1 = _mm256_loadu_ps(bp + (K) * kNR + 8);         \
    const float* a = ap + (K) * kMR;                                                                      \
    __m256 av = _mm256_broadcast_ss(a);                                                                   \
    c0l = _mm256_fmadd_ps(av, b0, c0l), c0h = _mm256_fmadd_ps(av, b1, c0h);                               \
    av = _mm256_broadcast_ss(a + 1);                                                                      \
    c1l = _mm256_fmadd_ps(av, b0, c1l), c1h = _mm256_fmadd_ps(av, b1, c1h);                               \
    av = _mm256_broadcast_ss(a + 2);                                                                      \
    c2l = _mm256_fmadd_ps(av, b0, c2l), c2h = _mm256_fmadd_ps(av, b1, c2h);                               \
    av = _mm256_broadcast_ss(a + 3);                                                                      \
    c3l = _mm256_fmadd_ps(av, b0, c3l), c3h = _mm256_fmadd_ps(av, b1, c3h);                               \
    av = _mm256_broadcast_ss(a + 4);                                                                      \
    c4l = _mm256_fmadd_ps(av, b0, c4l), c4h = _mm256_fmadd_ps(av, b1, c4h);                               \
    av = _mm256_broadcast_ss(a + 5);                                                                      \
    c5l = _mm256_fmadd_ps(av, b0, c5l), c5h = _mm256_fmadd_ps(av, b1, c5h);                               \
  }
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    MB_GEMM_STEP(k)
    MB_GEMM_STEP(k + 1)
    MB_GEMM_STEP(k + 2)
    MB_GEMM_STEP(k + 3)
  }
  for (; k < kc; ++k) MB_GEMM_STEP(k)
#undef MB_GEMM_STEP
  _mm256_storeu_ps(c, c0l), _mm256_storeu_ps(c + 8, c0h);
  _mm256_storeu_ps(c + ldc, c1l), _mm256_storeu_ps(c + ldc + 8, c1h);
  _mm256_storeu_ps(c + 2 * ldc, c2l), _mm256_storeu_ps(c + 2 * ldc + 8, c2h);
  _mm256_storeu_ps(c + 3 * ldc, c3l), _mm256_storeu_ps(c + 3 * ldc + 8, c3h);
  _mm256_storeu_ps(c + 4 * ldc, c4l), _mm256_storeu_ps(c + 4 * ldc + 8, c4h);
  _mm256_storeu_ps(c + 5 * ldc, c5l), _mm256_storeu_ps(c + 5 * ldc + 8, c5h);
}

// The 12 × 32 tile in twenty-four zmm accumulators (row i: acc[2i], acc[2i + 1]). Each output is one FMA per
// k in order, exactly as micro_avx2 computes it, so the two kernels give bit-identical C.
MB_AVX512_TARGET void micro_avx512(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc,
                                   bool accumulate) {
  constexpr int kMR = 12, kNR = 32;
  __m512 acc[2 * kMR];
  // Fully unrolled over the tile, so GCC keeps every accumulator in a register.
#pragma GCC unroll 24
  for (int t = 0; t < 2 * kMR; ++t)
    acc[t] = accumulate ? _mm512_loadu_ps(c + (t / 2) * ldc + (t % 2) * 16) : _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(bp + k * kNR), b1 = _mm512_loadu_ps(bp + k * kNR + 16);
    const float* a = ap + k * kMR;
    __builtin_prefetch(bp + (k + 8) * kNR);
#pragma GCC unroll 12
    for (int i = 0; i < kMR; ++i) {
      const __m512 av = _mm512_set1_ps(a[i]);
      acc[2 * i] = _mm512_fmadd_ps(av, b0, acc[2 * i]);
      acc[2 * i + 1] = _mm512_fmadd_ps(av, b1, acc[2 * i + 1]);
    }
  }
#pragma GCC unroll 24
  for (int t = 0; t < 2 * kMR; ++t) _mm512_storeu_ps(c + (t / 2) * ldc + (t % 2) * 16, acc[t]);
}
#endif

// The micro-kernel for this CPU; a tile of fewer rows or columns runs it on a zero-padded copy.
const Micro& micro() {
  static const Micro m = []() -> Micro {
#if MB_HAVE_X86_SIMD
    if (cpu_has_avx512_vnni()) return {micro_avx512, 12, 32, "avx512"};
    if (cpu_has_avx2()) return {micro_avx2, 6, 16, "avx2"};
#endif
    return {micro_portable<6, 16>, 6, 16, "portable"};
  }();
  return m;
}

#if MB_HAVE_X86_SIMD
// A full 32-column panel from rows with unit k stride: 16 k × 16 columns at a time, transposed in registers
// (two 16 × 16 transposes per step; plain copies, so the panel holds exactly what the scalar packer writes).
template <class T>
MB_AVX512_TARGET void pack_panel32_avx512(const T* const* rows, int64_t kc, float* dst) {
  int64_t k = 0;
  for (; k + 16 <= kc; k += 16)
    for (int half = 0; half < 2; ++half) {
      __m512 r[16], t[16];
      for (int i = 0; i < 16; ++i) r[i] = load16_f32(rows[half * 16 + i] + k);  // r[i] = column i, 16 k values
      for (int i = 0; i < 8; ++i) {  // within 128-bit lanes: (r0 r1) pairs interleaved
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
      }
      for (int i = 0; i < 4; ++i) {  // u[4i + c]: columns 4i … 4i + 3 at k = 4·lane + c
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
      }
      for (int c = 0; c < 4; ++c) {  // gather lane L of the four column groups: k = 4·L + c
        const __m512 w0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44), w1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xEE);
        const __m512 w2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44);
        const __m512 w3 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xEE);
        float* out = dst + (k + c) * 32 + half * 16;
        _mm512_storeu_ps(out, _mm512_shuffle_f32x4(w0, w2, 0x88));
        _mm512_storeu_ps(out + 4 * 32, _mm512_shuffle_f32x4(w0, w2, 0xDD));
        _mm512_storeu_ps(out + 8 * 32, _mm512_shuffle_f32x4(w1, w3, 0x88));
        _mm512_storeu_ps(out + 12 * 32, _mm512_shuffle_f32x4(w1, w3, 0xDD));
      }
    }
  for (; k < kc; ++k)
    for (int j = 0; j < 32; ++j) dst[k * 32 + j] = load_f32(rows[j] + k);
}
#endif

// Packs B[n0 + j, k0 + k] for j < nc, k < kc into panels of NR columns: panel p holds, for each k, the
// values of columns p·NR … p·NR + NR − 1 (zeros past nc), as f32.
template <class T, int NR>
void pack_b(const GemmB& B, int64_t n0, int64_t nc, int64_t k0, int64_t kc, float* out) {
  const T* base = static_cast<const T*>(B.data);
  const int64_t panels = (nc + NR - 1) / NR;
  const T* rows[NR];
  for (int64_t p = 0; p < panels; ++p) {
    float* dst = out + p * kc * NR;
    const int64_t cols = std::min<int64_t>(NR, nc - p * NR);
    for (int64_t j = 0; j < cols; ++j) rows[j] = base + (n0 + p * NR + j) * B.stride_n + k0 * B.stride_k;
    // k outer: the writes are sequential and each source row is read along k (a stream per column)
    if (B.stride_k == 1 && cols == NR) {
#if MB_HAVE_X86_SIMD
      if constexpr (NR == 32) {  // only the AVX-512 kernel uses 32-column panels
        pack_panel32_avx512(rows, kc, dst);
        continue;
      }
#endif
      for (int64_t k = 0; k < kc; ++k)
        for (int j = 0; j < NR; ++j) dst[k * NR + j] = load_f32(rows[j] + k);
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        for (int64_t j = 0; j < cols; ++j) dst[k * NR + j] = load_f32(rows[j] + k * B.stride_k);
        for (int64_t j = cols; j < NR; ++j) dst[k * NR + j] = 0.f;
      }
    }
  }
}

// The same panels from a quantized B: each row's k range dequantized once, then spread into its column
// (a full 32-column panel through the AVX-512 transposer).
void pack_quantized(const ops::QuantizedMatrix& q, int nr, int64_t n0, int64_t nc, int64_t k0, int64_t kc,
                    float* out) {
  thread_local std::vector<float> rows_store(size_t(kMaxNR * kKC));
  float* const rows = rows_store.data();  // [nr][kc]
  const int64_t panels = (nc + nr - 1) / nr;
  for (int64_t p = 0; p < panels; ++p) {
    float* dst = out + p * kc * nr;
    const int64_t cols = std::min<int64_t>(nr, nc - p * nr);
    for (int64_t j = 0; j < cols; ++j) dequantize_row_fast(q, n0 + p * nr + j, k0, kc, rows + j * kc);
#if MB_HAVE_X86_SIMD
    if (nr == 32 && cols == 32) {
      const float* row_ptrs[32];
      for (int j = 0; j < 32; ++j) row_ptrs[j] = rows + j * kc;
      pack_panel32_avx512(row_ptrs, kc, dst);
      continue;
    }
#endif
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t j = 0; j < nr; ++j) dst[k * nr + j] = j < cols ? rows[j * kc + k] : 0.f;
  }
}

// Panels of micro().nr columns.
void pack(const GemmB& B, int64_t n0, int64_t nc, int64_t k0, int64_t kc, float* out) {
  const int nr = micro().nr;
  if (B.quant) return pack_quantized(*B.quant, nr, n0, nc, k0, kc, out);
  dispatch_float(B.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (nr == 32) pack_b<T, 32>(B, n0, nc, k0, kc, out);
    else pack_b<T, 16>(B, n0, nc, k0, kc, out);
  });
}

int64_t padded_n(int64_t N) {
  const int nr = micro().nr;
  return (N + nr - 1) / nr * nr;
}

// A packed once per product: for each k slice of kKC, slivers of mr rows, k-major (ap[k·mr + i]; zero rows
// past M), so the mr broadcasts of a k step read one cache line. Slice k0 starts at k0 · padded_m.
struct PackedA {
  const float* data;
  int64_t padded_m;  // M rounded up to whole slivers
  const float* sliver(int64_t k0, int64_t kc, int64_t first_row, int mr) const {
    return data + k0 * padded_m + (first_row / mr) * kc * mr;
  }
};

// Sliver `s` (rows s·mr …) of A's k slice [k0, k0 + kc) into dst.
void pack_a_sliver(const float* A, int64_t lda, int64_t M, int mr, int64_t s, int64_t k0, int64_t kc, float* dst) {
  const int rows = int(std::min<int64_t>(mr, M - s * mr));
  const float* a = A + s * mr * lda + k0;
  for (int64_t k = 0; k < kc; ++k) {
    for (int r = 0; r < rows; ++r) dst[k * mr + r] = a[r * lda + k];
    for (int r = rows; r < mr; ++r) dst[k * mr + r] = 0.f;
  }
}

// One task: rows [m0, m0 + mc) × columns [n0, n0 + nc) of C over all of k. B comes packed (prepacked:
// the layout pack_gemm_b writes, n0 a multiple of tile_n) or is packed here.
void run_task(int64_t m0, int64_t mc, int64_t n0, int64_t nc, int64_t K, const PackedA& A, const GemmB* B,
              const float* prepacked, int64_t N, const float* bias, float* C, int64_t ldc) {
  // This thread's B slice, reused across calls; 64-byte aligned so no vector load splits a cache line.
  thread_local std::vector<float> packed_store;
  const Micro& mk = micro();
  const int tile_m = mk.mr, tile_n = mk.nr;  // this CPU's tile
  const int64_t panels = (nc + tile_n - 1) / tile_n;
  if (!prepacked && packed_store.size() < size_t(panels * kKC * tile_n + 16))
    packed_store.resize(size_t(panels * kKC * tile_n + 16));
  float* const packed = prepacked ? nullptr : align64(packed_store.data());
  alignas(64) float edge[kMaxMR * kMaxNR];  // a partial tile's C, tile_n wide
  const int64_t slivers = (mc + tile_m - 1) / tile_m;
  for (int64_t k0 = 0; k0 < std::max<int64_t>(K, 1); k0 += kKC) {
    const int64_t kc = std::min(kKC, K - k0);
    const bool accumulate = k0 > 0;
    if (kc == 0) {  // K == 0: the sums are empty
      for (int64_t i = 0; i < mc; ++i) std::fill(C + (m0 + i) * ldc + n0, C + (m0 + i) * ldc + n0 + nc, 0.f);
      break;
    }
    const float* panels_of_slice = packed;
    if (prepacked) panels_of_slice = prepacked + k0 * padded_n(N) + (n0 / tile_n) * kc * tile_n;
    else pack(*B, n0, nc, k0, kc, packed);
    const float* ap = A.sliver(k0, kc, m0, tile_m);
    // Panel outer, sliver inner: a B panel (kc × tile_n) stays in L1 while every A sliver passes it.
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t col = n0 + p * tile_n;
      const int nr = int(std::min<int64_t>(tile_n, n0 + nc - col));
      const float* bp = panels_of_slice + p * kc * tile_n;
      for (int64_t s = 0; s < slivers; ++s) {
        const int mr = int(std::min<int64_t>(tile_m, mc - s * tile_m));
        float* c = C + (m0 + s * tile_m) * ldc + col;
        const float* a = ap + s * kc * tile_m;
        if (s + 1 < slivers)  // the next tile's C rows, in flight while this one computes
          for (int r = 0; r < tile_m && (s + 1) * tile_m + r < mc; ++r) __builtin_prefetch(c + (tile_m + r) * ldc, 1);
        if (nr == tile_n && mr == tile_m) {
          mk.fn(kc, a, bp, c, ldc, accumulate);
        } else {  // a partial tile: compute it full-size in `edge`, copy the valid part
          for (int r = 0; r < tile_m; ++r)
            for (int j = 0; j < tile_n; ++j) edge[r * tile_n + j] = accumulate && r < mr && j < nr ? c[r * ldc + j] : 0.f;
          mk.fn(kc, a, bp, edge, tile_n, accumulate);
          for (int r = 0; r < mr; ++r) std::copy(edge + r * tile_n, edge + r * tile_n + nr, c + r * ldc);
        }
      }
    }
  }
  if (bias)
    for (int64_t i = 0; i < mc; ++i)
      for (int64_t j = 0; j < nc; ++j) C[(m0 + i) * ldc + n0 + j] += bias[n0 + j];
}

void run(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const GemmB* B, const float* prepacked,
         const float* bias, float* C, int64_t ldc, bool parallel) {
  if (M <= 0 || N <= 0) return;
  const int tile_m = micro().mr;
  const int64_t slivers = (M + tile_m - 1) / tile_m, slices = std::max<int64_t>(1, (K + kKC - 1) / kKC);
  // A packed by this thread's store (the attention kernel calls this on every pool thread at once).
  thread_local std::vector<float> a_store;
  const size_t a_floats = size_t(slivers * tile_m * std::max<int64_t>(K, 1) + 16);
  if (a_store.size() < a_floats) a_store.resize(a_floats);
  const PackedA pa{align64(a_store.data()),
                   slivers * tile_m};
  auto pack_item = [&](int64_t item) {  // one sliver of one k slice
    const int64_t k0 = (item / slivers) * kKC, s = item % slivers, kc = std::min(kKC, K - k0);
    if (kc > 0) pack_a_sliver(A, lda, M, tile_m, s, k0, kc, const_cast<float*>(pa.sliver(k0, kc, s * tile_m, tile_m)));
  };
  const int64_t mb = (M + kMC - 1) / kMC, nb = (N + kNC - 1) / kNC;
  auto task = [&](int64_t t) {
    const int64_t bi = t / nb, bj = t % nb;
    const int64_t m0 = bi * kMC, n0 = bj * kNC;
    run_task(m0, std::min(kMC, M - m0), n0, std::min(kNC, N - n0), K, pa, B, prepacked, N, bias, C, ldc);
  };
  if (!parallel) {
    for (int64_t i = 0; i < slices * slivers; ++i) pack_item(i);
    for (int64_t t = 0; t < mb * nb; ++t) task(t);
    return;
  }
  parallel_for(slices * slivers, 4, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) pack_item(i);
  });
  parallel_for(mb * nb, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) task(t);
  });
}

}  // namespace

const char* gemm_kernel_name() { return micro().name; }

void transpose_panel32(const float* const* rows, int64_t kc, float* dst) {
#if MB_HAVE_X86_SIMD
  pack_panel32_avx512(rows, kc, dst);
#else
  for (int64_t k = 0; k < kc; ++k)
    for (int j = 0; j < 32; ++j) dst[k * 32 + j] = rows[j][k];
#endif
}

void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const GemmB& B, const float* bias, float* C,
          int64_t ldc, bool parallel) {
  run(M, N, K, A, lda, &B, nullptr, bias, C, ldc, parallel);
}

int64_t packed_b_size(int64_t N, int64_t K) { return padded_n(N) * std::max<int64_t>(K, 1); }

// Slice by slice of kKC along k, every panel of the slice: the layout run_task reads.
void pack_gemm_b(const GemmB& B, int64_t N, int64_t K, float* packed) {
  for (int64_t k0 = 0; k0 < K; k0 += kKC) pack(B, 0, N, k0, std::min(kKC, K - k0), packed + k0 * padded_n(N));
}

void gemm_prepacked(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* packed_b,
                    const float* bias, float* C, int64_t ldc, bool parallel) {
  run(M, N, K, A, lda, nullptr, packed_b, bias, C, ldc, parallel);
}

}  // namespace mb::cpu
