// Prefill GEMM with quantized weights on AVX-512 VNNI: Y[m, n] = Σ_g s[n,g]·dx[m,g]·Σ_{k∈g} q[n,k]·x16[m,k]
// + b[n,g]·Σ_{k∈g} x[m,k] (+ bias[n]), the decode kernel's 16-bit activations (round_x16) in a GEMM.
//
// Each group's Σ q·x16 is exact in int32 lanes (vpdpwssd: 32 products of 16-bit pairs per instruction, about
// twice the multiply-adds per cycle of an f32 FMA here); only the f32 sum over groups rounds, in group order
// (so the result does not depend on the blocking or the thread count). Tiles of 6 rows × 32 columns: twelve
// int32 accumulators for the current group and twelve f32 ones for the whole row, all in registers.
#include <algorithm>
#include <atomic>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/simd.h"
#include "core/thread_pool.h"

namespace mb::cpu {

#if MB_HAVE_X86_SIMD
namespace {

constexpr int kMR = 6, kNR = 32;  // rows of x, weight rows (columns of Y) per tile
constexpr int64_t kKC = 256;       // k per slice: whole groups of 32, 64 or 128
constexpr int64_t kNC = 192;       // weight rows per task (6 panels)
constexpr int64_t kMC = 576;       // x rows per task (96 slivers)

// x rounded and packed once: per k slice, slivers of kMR rows holding each k pair as one int32
// (x16[k] | x16[k + 1] << 16) for rows 0..5 in turn; dx and Σx per (row, group) beside.
struct PackedX {
  std::vector<int32_t> pairs;
  std::vector<float> dx, xsum;  // [padded M, G]
  int64_t padded_m = 0, G = 0;
  const int32_t* sliver(int64_t k0, int64_t kc, int64_t first_row) const {
    return pairs.data() + (k0 / 2) * padded_m + (first_row / kMR) * (kc / 2) * kMR;
  }
};

// A panel of kNR weight rows for one k slice: each k pair of each row as one int32 (q[k] | q[k + 1] << 16)
// and the rows' scales / biases per group of the slice (zeros past the last row).
struct Panel {
  int32_t pairs[kKC / 2 * kNR];
  float s[kKC / 32 * kNR], b[kKC / 32 * kNR];
};

// Row n's k pairs [k0, k0 + kc) as int32 (q[k] | q[k + 1] << 16), 16 pairs per step.
MB_AVX512_TARGET void row_pairs(const ops::QuantizedMatrix& w, int64_t n, int64_t k0, int64_t kc, int32_t* out) {
  const uint8_t* q = w.q.data_as<const uint8_t>() + n * w.q.size(1);
  int64_t kp = 0;
  if (w.bits == 4) {  // byte k/2 holds column k in its low nibble and k + 1 in its high one
    for (; kp + 16 <= kc / 2; kp += 16) {
      const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k0 / 2 + kp)));
      const __m512i lo = _mm512_and_si512(v, _mm512_set1_epi32(0x0F)), hi = _mm512_srli_epi32(v, 4);
      _mm512_storeu_si512(out + kp, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
    for (; kp < kc / 2; ++kp) out[kp] = int32_t((q[k0 / 2 + kp] & 0x0F) | (q[k0 / 2 + kp] >> 4) << 16);
  } else {  // two bytes per pair: zero-extend the 16-bit pair, then move its high byte up
    for (; kp + 16 <= kc / 2; kp += 16) {
      const __m512i v =
          _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + k0 + 2 * kp)));
      const __m512i lo = _mm512_and_si512(v, _mm512_set1_epi32(0xFF)), hi = _mm512_srli_epi32(v, 8);
      _mm512_storeu_si512(out + kp, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
    for (; kp < kc / 2; ++kp) out[kp] = int32_t(uint32_t(q[k0 + 2 * kp]) | uint32_t(q[k0 + 2 * kp + 1]) << 16);
  }
}

template <class ST>
void pack_panel(const ops::QuantizedMatrix& w, int64_t n0, int rows, int64_t k0, int64_t kc, Panel& p) {
  const int64_t G = w.cols() / w.group_size, groups = kc / w.group_size;
  const ST* S = w.scales.data_as<const ST>();
  const ST* B = w.biases.data_as<const ST>();
  alignas(64) int32_t row_store[kNR][kKC / 2];  // each weight row's pairs, then transposed into the panel
  const float* row_ptrs[kNR];
  for (int j = 0; j < kNR; ++j) {
    if (j < rows) row_pairs(w, n0 + j, k0, kc, row_store[j]);
    else std::fill(row_store[j], row_store[j] + kc / 2, 0);
    row_ptrs[j] = reinterpret_cast<const float*>(row_store[j]);
    for (int64_t g = 0; g < groups; ++g) {
      p.s[g * kNR + j] = j < rows ? load_f32(S + (n0 + j) * G + k0 / w.group_size + g) : 0.f;
      p.b[g * kNR + j] = j < rows ? load_f32(B + (n0 + j) * G + k0 / w.group_size + g) : 0.f;
    }
  }
  transpose_panel32(row_ptrs, kc / 2, reinterpret_cast<float*>(p.pairs));
}

// One 6 × 32 tile over one k slice: acc (f32, [6][32]) += Σ over the slice's groups. xp: the sliver's pairs;
// dx / xsum: row i's values at [i·G + g0 + g] (g0 = the slice's first group).
MB_AVX512_TARGET void tile_x16(const int32_t* xp, const Panel& p, int64_t kc, int gs, const float* dx,
                               const float* xsum, int64_t G, int64_t g0, float* acc) {
  __m512 c[2 * kMR];
  for (int t = 0; t < 2 * kMR; ++t) c[t] = _mm512_loadu_ps(acc + t * 16);
  const int pairs_per_group = gs / 2;
  for (int64_t g = 0; g < kc / gs; ++g) {
    __m512i d[2 * kMR];
    for (int t = 0; t < 2 * kMR; ++t) d[t] = _mm512_setzero_si512();
    const int32_t* bp = p.pairs + g * pairs_per_group * kNR;
    const int32_t* ap = xp + g * pairs_per_group * kMR;
    for (int kp = 0; kp < pairs_per_group; ++kp) {
      const __m512i b0 = _mm512_loadu_si512(bp + kp * kNR), b1 = _mm512_loadu_si512(bp + kp * kNR + 16);
#pragma GCC unroll 6
      for (int i = 0; i < kMR; ++i) {
        const __m512i a = _mm512_set1_epi32(ap[kp * kMR + i]);
        d[2 * i] = _mm512_dpwssd_epi32(d[2 * i], a, b0);
        d[2 * i + 1] = _mm512_dpwssd_epi32(d[2 * i + 1], a, b1);
      }
    }
    // The group's f32 contribution: (s·dx)·Σ q·x16 + b·Σx.
    const __m512 s0 = _mm512_loadu_ps(p.s + g * kNR), s1 = _mm512_loadu_ps(p.s + g * kNR + 16);
    const __m512 z0 = _mm512_loadu_ps(p.b + g * kNR), z1 = _mm512_loadu_ps(p.b + g * kNR + 16);
#pragma GCC unroll 6
    for (int i = 0; i < kMR; ++i) {
      const __m512 dxv = _mm512_set1_ps(dx[i * G + g0 + g]), xs = _mm512_set1_ps(xsum[i * G + g0 + g]);
      c[2 * i] = _mm512_fmadd_ps(_mm512_mul_ps(s0, dxv), _mm512_cvtepi32_ps(d[2 * i]), c[2 * i]);
      c[2 * i] = _mm512_fmadd_ps(z0, xs, c[2 * i]);
      c[2 * i + 1] = _mm512_fmadd_ps(_mm512_mul_ps(s1, dxv), _mm512_cvtepi32_ps(d[2 * i + 1]), c[2 * i + 1]);
      c[2 * i + 1] = _mm512_fmadd_ps(z1, xs, c[2 * i + 1]);
    }
  }
  for (int t = 0; t < 2 * kMR; ++t) _mm512_storeu_ps(acc + t * 16, c[t]);
}

// Rounds and packs x (false: a non-finite value, nothing usable).
bool pack_x(int64_t M, const float* X, int64_t K, int gs, PackedX& px) {
  const int64_t G = K / gs, slivers = (M + kMR - 1) / kMR;
  px.G = G;
  px.padded_m = slivers * kMR;
  px.dx.assign(size_t(px.padded_m * G), 0.f);
  px.xsum.assign(size_t(px.padded_m * G), 0.f);
  px.pairs.resize(size_t(px.padded_m * K / 2));
  thread_local std::vector<int16_t> x16_store;  // (named inside a lambda it would be each worker's own)
  if (x16_store.size() < size_t(M * K)) x16_store.resize(size_t(M * K));
  int16_t* const x16 = x16_store.data();
  std::atomic<bool> finite{true};
  parallel_for(M, 4, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const float* x = X + m * K;
      // x16, dx and Σx per group as the decode kernel's
      if (!round_x16(x, K, gs, false, x16 + m * K, px.dx.data() + m * G, px.xsum.data() + m * G)) finite = false;
    }
  });
  if (!finite) return false;
  parallel_for(slivers, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s)
      for (int64_t k0 = 0; k0 < K; k0 += kKC) {
        const int64_t kc = std::min(kKC, K - k0);
        int32_t* dst = const_cast<int32_t*>(px.sliver(k0, kc, s * kMR));
        for (int64_t kp = 0; kp < kc / 2; ++kp)
          for (int i = 0; i < kMR; ++i) {
            const int64_t m = s * kMR + i;
            const int16_t* xr = x16 + m * K + k0 + 2 * kp;
            dst[kp * kMR + i] = m < M ? int32_t(uint16_t(xr[0]) | uint32_t(uint16_t(xr[1])) << 16) : 0;
          }
      }
  });
  return true;
}

}  // namespace

bool gemm_quantized_x16(int64_t M, const float* X, const ops::QuantizedMatrix& w, const float* bias, float* Y) {
  const int gs = w.group_size;
  const int64_t N = w.rows(), K = w.cols();
  if (!cpu_has_avx512_vnni() || (gs != 32 && gs != 64 && gs != 128) || M <= 0 || N <= 0 || K <= 0) return false;
  thread_local PackedX px_store;  // the calling thread's; workers read it through `px`
  const PackedX& px = px_store;
  if (!pack_x(M, X, K, gs, px_store)) return false;
  const int64_t G = px.G;
  const int64_t mb = (M + kMC - 1) / kMC, nb = (N + kNC - 1) / kNC;
  parallel_for(mb * nb, 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<Panel> panels(kNC / kNR);
    thread_local std::vector<float> acc_store;  // the task's f32 sums, one 6 × 32 tile after another
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t m0 = (t / nb) * kMC, n0 = (t % nb) * kNC;
      const int64_t mc = std::min(kMC, M - m0), nc = std::min(kNC, N - n0);
      const int64_t slivers = (mc + kMR - 1) / kMR, npanels = (nc + kNR - 1) / kNR;
      acc_store.assign(size_t(slivers * npanels * kMR * kNR), 0.f);
      for (int64_t k0 = 0; k0 < K; k0 += kKC) {
        const int64_t kc = std::min(kKC, K - k0);
        for (int64_t p = 0; p < npanels; ++p)
          dispatch_float(w.scales.dtype(), [&](auto tag) {
            pack_panel<decltype(tag)>(w, n0 + p * kNR, int(std::min<int64_t>(kNR, nc - p * kNR)), k0, kc,
                                      panels[size_t(p)]);
          });
        const int32_t* xs = px.sliver(k0, kc, m0);
        for (int64_t p = 0; p < npanels; ++p)
          for (int64_t s = 0; s < slivers; ++s) {
            const int64_t row = m0 + s * kMR;
            tile_x16(xs + s * (kc / 2) * kMR, panels[size_t(p)], kc, gs, px.dx.data() + row * G,
                     px.xsum.data() + row * G, G, k0 / gs, acc_store.data() + (s * npanels + p) * kMR * kNR);
          }
      }
      for (int64_t s = 0; s < slivers; ++s)
        for (int64_t p = 0; p < npanels; ++p) {
          const float* a = acc_store.data() + (s * npanels + p) * kMR * kNR;
          for (int i = 0; i < kMR && s * kMR + i < mc; ++i)
            for (int j = 0; j < kNR && p * kNR + j < nc; ++j) {
              const int64_t n = n0 + p * kNR + j;
              Y[(m0 + s * kMR + i) * N + n] = a[i * kNR + j] + (bias ? bias[n] : 0.f);
            }
        }
    }
  });
  return true;
}

#else

bool gemm_quantized_x16(int64_t, const float*, const ops::QuantizedMatrix&, const float*, float*) { return false; }

#endif

}  // namespace mb::cpu
