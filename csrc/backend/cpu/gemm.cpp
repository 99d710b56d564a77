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

constexpr int kMR = 6;        // rows of C per micro-kernel
constexpr int kNR = 16;       // columns of C per micro-kernel (two 8-lane vectors)
constexpr int64_t kKC = 256;  // k per slice: an MR × KC sliver of A and a KC × NR panel of B stay in L1 / L2
constexpr int64_t kNC = 192;  // columns per task (12 panels): the task's packed B slice is 192 KB
constexpr int64_t kMC = 288;  // rows per task: B is packed once per task, so once per 288 rows

// c[i·ldc + j] (+)= Σ_k ap[k·kMR + i] · bp[k·kNR + j] for i < kMR, j < kNR; `accumulate`: start from c.
using MicroFn = void (*)(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, bool accumulate);

template <int MR>
void micro_portable(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, bool accumulate) {
  float acc[MR][kNR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < kNR; ++j) acc[i][j] = accumulate ? c[i * ldc + j] : 0.f;
  for (int64_t k = 0; k < kc; ++k)
    for (int i = 0; i < MR; ++i) {
      const float av = ap[k * MR + i];
      for (int j = 0; j < kNR; ++j) acc[i][j] += av * bp[k * kNR + j];
    }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < kNR; ++j) c[i * ldc + j] = acc[i][j];
}

#if MB_HAVE_X86_SIMD
// The 6 × 16 tile in twelve named accumulators (GCC keeps an array of vectors on the stack in the loop).
// ap: the A sliver packed k-major (ap[k·kMR + i]), so the six broadcasts of a step read one cache line.
MB_AVX2_TARGET void micro_avx2(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, bool accumulate) {
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
#endif

// The kMR × kNR kernel for this CPU; a tile of fewer rows runs it on a zero-padded copy.
MicroFn micro() {
  static const MicroFn m = [] {
#if MB_HAVE_X86_SIMD
    if (cpu_has_avx2()) return MicroFn(micro_avx2);
#endif
    return MicroFn(micro_portable<kMR>);
  }();
  return m;
}

// Packs B[n0 + j, k0 + k] for j < nc, k < kc into panels of kNR columns: panel p holds, for each k, the
// values of columns p·kNR … p·kNR + kNR − 1 (zeros past nc), as f32.
template <class T>
void pack_b(const GemmB& B, int64_t n0, int64_t nc, int64_t k0, int64_t kc, float* out) {
  const T* base = static_cast<const T*>(B.data);
  const int64_t panels = (nc + kNR - 1) / kNR;
  const T* rows[kNR];
  for (int64_t p = 0; p < panels; ++p) {
    float* dst = out + p * kc * kNR;
    const int64_t cols = std::min<int64_t>(kNR, nc - p * kNR);
    for (int64_t j = 0; j < cols; ++j) rows[j] = base + (n0 + p * kNR + j) * B.stride_n + k0 * B.stride_k;
    // k outer: the writes are sequential and each source row is read along k (a stream per column)
    if (B.stride_k == 1 && cols == kNR) {
      for (int64_t k = 0; k < kc; ++k)
        for (int j = 0; j < kNR; ++j) dst[k * kNR + j] = load_f32(rows[j] + k);
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        for (int64_t j = 0; j < cols; ++j) dst[k * kNR + j] = load_f32(rows[j] + k * B.stride_k);
        for (int64_t j = cols; j < kNR; ++j) dst[k * kNR + j] = 0.f;
      }
    }
  }
}

// The same panels from a quantized B: each row's k range dequantized once, then spread into its column.
void pack_quantized(const ops::QuantizedMatrix& q, int64_t n0, int64_t nc, int64_t k0, int64_t kc, float* out) {
  float row[kKC];
  const int64_t panels = (nc + kNR - 1) / kNR;
  for (int64_t p = 0; p < panels; ++p) {
    float* dst = out + p * kc * kNR;
    const int64_t cols = std::min<int64_t>(kNR, nc - p * kNR);
    for (int64_t j = 0; j < kNR; ++j) {
      if (j < cols) dequantize_row(q, n0 + p * kNR + j, k0, kc, row);
      for (int64_t k = 0; k < kc; ++k) dst[k * kNR + j] = j < cols ? row[k] : 0.f;
    }
  }
}

void pack(const GemmB& B, int64_t n0, int64_t nc, int64_t k0, int64_t kc, float* out) {
  if (B.quant) return pack_quantized(*B.quant, n0, nc, k0, kc, out);
  dispatch_float(B.dtype, [&](auto tag) { pack_b<decltype(tag)>(B, n0, nc, k0, kc, out); });
}

int64_t padded_n(int64_t N) { return (N + kNR - 1) / kNR * kNR; }

// One task: rows [m0, m0 + mc) × columns [n0, n0 + nc) of C over all of k. B comes packed (prepacked:
// the layout pack_gemm_b writes, n0 a multiple of kNR) or is packed here.
void run_task(int64_t m0, int64_t mc, int64_t n0, int64_t nc, int64_t K, const float* A, int64_t lda, const GemmB* B,
              const float* prepacked, int64_t N, const float* bias, float* C, int64_t ldc) {
  // This thread's B slice, reused across calls; 64-byte aligned so no vector load splits a cache line.
  thread_local std::vector<float> packed_store;
  const int64_t panels = (nc + kNR - 1) / kNR;
  if (!prepacked && packed_store.size() < size_t(panels * kKC * kNR + 16))
    packed_store.resize(size_t(panels * kKC * kNR + 16));
  float* const packed =
      prepacked ? nullptr
                : reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(packed_store.data()) + 63) & ~uintptr_t(63));
  const MicroFn mk = micro();
  alignas(64) float edge[kMR * kNR];  // a partial tile's C, kNR wide
  // The task's A rows for one k slice, packed as slivers of kMR rows, k-major (zero rows past the last).
  thread_local std::vector<float> a_store;
  const int64_t slivers = (mc + kMR - 1) / kMR;
  if (a_store.size() < size_t(slivers * kKC * kMR + 16)) a_store.resize(size_t(slivers * kKC * kMR + 16));
  float* const ap = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(a_store.data()) + 63) & ~uintptr_t(63));
  for (int64_t k0 = 0; k0 < std::max<int64_t>(K, 1); k0 += kKC) {
    const int64_t kc = std::min(kKC, K - k0);
    const bool accumulate = k0 > 0;
    if (kc == 0) {  // K == 0: the sums are empty
      for (int64_t i = 0; i < mc; ++i) std::fill(C + (m0 + i) * ldc + n0, C + (m0 + i) * ldc + n0 + nc, 0.f);
      break;
    }
    const float* panels_of_slice = packed;
    if (prepacked) panels_of_slice = prepacked + k0 * padded_n(N) + (n0 / kNR) * kc * kNR;
    else pack(*B, n0, nc, k0, kc, packed);
    for (int64_t s = 0; s < slivers; ++s) {
      const int mr = int(std::min<int64_t>(kMR, mc - s * kMR));
      const float* a = A + (m0 + s * kMR) * lda + k0;
      float* dst = ap + s * kc * kMR;
      for (int64_t k = 0; k < kc; ++k)
        for (int r = 0; r < kMR; ++r) dst[k * kMR + r] = r < mr ? a[r * lda + k] : 0.f;
    }
    // Panel outer, sliver inner: a B panel (kc × kNR) stays in L1 while every A sliver passes it.
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t col = n0 + p * kNR;
      const int nr = int(std::min<int64_t>(kNR, n0 + nc - col));
      const float* bp = panels_of_slice + p * kc * kNR;
      for (int64_t s = 0; s < slivers; ++s) {
        const int mr = int(std::min<int64_t>(kMR, mc - s * kMR));
        float* c = C + (m0 + s * kMR) * ldc + col;
        const float* a = ap + s * kc * kMR;
        if (s + 1 < slivers)  // the next tile's C rows, in flight while this one computes
          for (int r = 0; r < kMR && (s + 1) * kMR + r < mc; ++r) __builtin_prefetch(c + (kMR + r) * ldc, 1);
        if (nr == kNR && mr == kMR) {
          mk(kc, a, bp, c, ldc, accumulate);
        } else {  // a partial tile: compute it full-size in `edge`, copy the valid part
          for (int r = 0; r < kMR; ++r)
            for (int j = 0; j < kNR; ++j) edge[r * kNR + j] = accumulate && r < mr && j < nr ? c[r * ldc + j] : 0.f;
          mk(kc, a, bp, edge, kNR, accumulate);
          for (int r = 0; r < mr; ++r) std::copy(edge + r * kNR, edge + r * kNR + nr, c + r * ldc);
        }
      }
    }
  }
  if (bias)
    for (int64_t i = 0; i < mc; ++i)
      for (int64_t j = 0; j < nc; ++j) C[(m0 + i) * ldc + n0 + j] += bias[n0 + j];
}

}  // namespace

namespace {

void run(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const GemmB* B, const float* prepacked,
         const float* bias, float* C, int64_t ldc, bool parallel) {
  if (M <= 0 || N <= 0) return;
  const int64_t mb = (M + kMC - 1) / kMC, nb = (N + kNC - 1) / kNC;
  auto task = [&](int64_t t) {
    const int64_t bi = t / nb, bj = t % nb;
    const int64_t m0 = bi * kMC, n0 = bj * kNC;
    run_task(m0, std::min(kMC, M - m0), n0, std::min(kNC, N - n0), K, A, lda, B, prepacked, N, bias, C, ldc);
  };
  if (!parallel) {
    for (int64_t t = 0; t < mb * nb; ++t) task(t);
    return;
  }
  parallel_for(mb * nb, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) task(t);
  });
}

}  // namespace

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
