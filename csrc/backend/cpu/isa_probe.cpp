#include "backend/cpu/isa_probe.h"

#include <chrono>
#include <cstdint>

#include "backend/cpu/gemm.h"
#include "backend/cpu/simd.h"

namespace mb::cpu {

namespace {

#if MB_HAVE_X86_SIMD
// seconds for `steps` rounds of 12 independent accumulators each taking one instruction (STEP(a)): the
// loop sits inside each ISA's own target function, so the vectors stay in registers.
#define MB_ISA_LOOP(NAME, TARGET, V, INIT, STEP)                                             \
  TARGET double NAME(int64_t steps) {                                                        \
    V acc[12];                                                                               \
    for (auto& a : acc) a = INIT;                                                            \
    const auto t0 = std::chrono::steady_clock::now();                                        \
    for (int64_t s = 0; s < steps; ++s) {                                                    \
      _Pragma("GCC unroll 12") for (auto& a : acc) a = STEP;                                 \
    }                                                                                        \
    const auto t1 = std::chrono::steady_clock::now();                                        \
    volatile V sink = acc[0];                                                                \
    for (int i = 1; i < 12; ++i) sink = acc[i];                                              \
    return std::chrono::duration<double>(t1 - t0).count();                                   \
  }

#define MB_BF16_TARGET __attribute__((target("avx512f,avx512bf16")))
MB_ISA_LOOP(fma_ymm, MB_AVX2_TARGET, __m256, _mm256_set1_ps(0.5f),
            _mm256_fmadd_ps(a, _mm256_set1_ps(1.0f), _mm256_set1_ps(1e-9f)))
MB_ISA_LOOP(fma_zmm, MB_AVX512_TARGET, __m512, _mm512_set1_ps(0.5f),
            _mm512_fmadd_ps(a, _mm512_set1_ps(1.0f), _mm512_set1_ps(1e-9f)))
MB_ISA_LOOP(dpbf16, MB_BF16_TARGET, __m512, _mm512_set1_ps(0.5f),
            _mm512_dpbf16_ps(a, (__m512bh)_mm512_set1_epi16(0x3f80), (__m512bh)_mm512_set1_epi16(0x3f80)))
MB_ISA_LOOP(dpwssd, MB_AVX512_TARGET, __m512i, _mm512_set1_epi32(1),
            _mm512_dpwssd_epi32(a, _mm512_set1_epi16(3), _mm512_set1_epi16(3)))
MB_ISA_LOOP(dpbusd, MB_AVX512_TARGET, __m512i, _mm512_set1_epi32(1),
            _mm512_dpbusd_epi32(a, _mm512_set1_epi8(3), _mm512_set1_epi8(3)))
#undef MB_ISA_LOOP

// Multiply-adds per second / 1e9 of `loop` (macs per instruction), timed over about `seconds`.
double rate(double (*loop)(int64_t), int macs, double seconds) {
  int64_t steps = 1 << 14;
  while (loop(steps) < seconds / 4) steps *= 2;  // calibrate (and warm the core up)
  const double t = loop(steps);
  return double(steps) * 12 * macs / t / 1e9;
}

// The AMX tile product (backend/cpu/bf16_gemm_amx.cpp): four independent TDPBF16PS per step, 8192 each.
double amx_rate(double seconds) {
  int64_t steps = 1 << 10;
  while (amx_bf16_probe_seconds(steps) < seconds / 4) steps *= 2;
  return double(steps) * 4 * 8192 / amx_bf16_probe_seconds(steps) / 1e9;
}
#endif

}  // namespace

std::vector<IsaRate> measure_isa_rates(double seconds) {
  std::vector<IsaRate> out;
#if MB_HAVE_X86_SIMD
  __builtin_cpu_init();
  const bool avx512 = cpu_has_avx512_vnni();
  out.push_back({"vfmadd231ps ymm (f32)", cpu_has_avx2() ? rate(fma_ymm, 8, seconds) : 0.0});
  out.push_back({"vfmadd231ps zmm (f32)", avx512 ? rate(fma_zmm, 16, seconds) : 0.0});
  out.push_back({"vdpbf16ps zmm (bf16 pairs)", avx512 && __builtin_cpu_supports("avx512bf16") ? rate(dpbf16, 32, seconds) : 0.0});
  out.push_back({"vpdpwssd zmm (int16 pairs)", avx512 ? rate(dpwssd, 32, seconds) : 0.0});
  out.push_back({"vpdpbusd zmm (int8 quads)", avx512 ? rate(dpbusd, 64, seconds) : 0.0});
  out.push_back({"tdpbf16ps (AMX bf16 tiles)", amx_bf16_supported() ? amx_rate(seconds) : 0.0});
#else
  (void)seconds;
#endif
  return out;
}

}  // namespace mb::cpu
