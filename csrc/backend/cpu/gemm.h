// A blocked GEMM for the CPU fast kernels: C[m, n] = Σ_k A[m, k] · B[n, k] (+ bias[n]), f32 accumulation.
//
// Outer-product micro-kernels (BLIS style): B is packed into panels of nr columns (converted to f32 from
// its storage type as it is packed), A rows are packed into slivers of mr rows, and an mr × nr block of
// C lives in registers across a kc-long slice of k. Each output is summed sequentially in k (one FMA
// per step; C carries the running sum from one k slice to the next), so the result does not depend on
// the blocking or on the number of threads.
//
// Used by linear_fast for more than a few rows, and by the attention kernel's long-sequence path.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "ops/params.h"

namespace mb::cpu {

// B[n, k] at data + n·stride_n + k·stride_k (elements), f32 / bf16 / f16; or, when `quant` is set, the
// quantized matrix's values s·q + b (data, dtype and strides unused).
struct GemmB {
  const void* data;
  DType dtype;
  int64_t stride_n, stride_k;
  const ops::QuantizedMatrix* quant = nullptr;
};

// The micro-kernel this CPU runs: "avx512" (12 × 32 tiles; MARKBASE_SIMD=avx2 keeps AVX2), "avx2" (6 × 16) or
// "portable". All give the same sums in the same order (one FMA per k), so the same C on x86.
const char* gemm_kernel_name();

// dst[k·32 + j] = rows[j][k] for j < 32, k < kc: 32 rows made one panel, 16 × 16 blocks transposed in
// registers (bit copies, so any 32-bit payload moves unchanged). AVX-512 only (cpu_has_avx512_vnni()).
void transpose_panel32(const float* const* rows, int64_t kc, float* dst);

// A: [M, K] f32 with row stride lda; C: [M, N] f32 with row stride ldc (written, not accumulated into).
// bias: [N] f32 or null. parallel: spread the work over the thread pool (false inside a parallel region).
void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const GemmB& B, const float* bias, float* C,
          int64_t ldc, bool parallel = true);

// bf16 products for prefill with bf16 weights (linear_fast's decode GEMV rounds x the same way) (backend/cpu/bf16_gemm.cpp): C = bf16(A) · Bᵀ (+ bias), A [M, K]
// f32 rounded to bf16 (nearest-even), B [N, K] bf16 contiguous, C [M, N] f32 contiguous; vdpbf16ps, f32
// sums over k pairs in order. False (nothing written) when it does not apply: !bf16_products_enabled() or
// an odd K.
bool gemm_bf16_products(int64_t M, int64_t N, int64_t K, const float* A, const bf16_t* B, const float* bias, float* C);
// The same products for decode rows (M >= 1, bf16_t B [N, K] contiguous): A rounded to bf16, weight rows
// streamed in order, one vdpbf16ps per 32 weights, f32 sums (lanes, then across lanes) in an order that does
// not depend on M (rows in passes of at most 2 over each block of B). False when it does not apply (as
// gemm_bf16_products). linear_fast takes it for up to 8 rows, or any number under row_invariant.
bool gemv_bf16_products(int64_t M, int64_t N, int64_t K, const float* A, const bf16_t* B, const float* bias, float* C);
// bf16_products_supported(): AVX512_BF16 present and AVX-512 kernels allowed (MARKBASE_SIMD). enabled():
// supported, and worth it — on AMD (Zen 4 / 5 do twice the multiply-adds of an f32 FMA with vdpbf16ps, Intel
// half); MARKBASE_BF16_PRODUCTS=0 / 1 overrides the vendor rule, set_bf16_products(0 / 1) both (tests;
// -1 clears it).
bool bf16_products_supported();
bool bf16_products_enabled();
void set_bf16_products(int mode);
// The same products on Intel AMX tiles (backend/cpu/bf16_gemm_amx.cpp), taken by gemm_bf16_products when
// amx_bf16_enabled(): supported = AVX512_BF16 and AMX-BF16 listed and the tile data granted by Linux;
// enabled = supported and not switched off (MARKBASE_AMX=0, set_amx_bf16(0); -1 clears the override). With
// AMX enabled, bf16 products are taken by default on Intel as on AMD. False (nothing written) as
// gemm_bf16_products, or when AMX is not enabled.
bool amx_bf16_supported();
bool amx_bf16_enabled();
void set_amx_bf16(int mode);
bool gemm_bf16_amx(int64_t M, int64_t N, int64_t K, const float* A, const bf16_t* B, const float* bias, float* C);
// Seconds for `steps` rounds of four independent TDPBF16PS (4 × 8192 multiply-adds) on resident tiles, for
// bench/isa_probe.py; 0 where AMX is not supported.
double amx_bf16_probe_seconds(int64_t steps);

// B packed once for several products with the same B (attention's K and V of one head): packed_b_size(N, K)
// floats, filled by pack_gemm_b and read by gemm_prepacked in place of B.
int64_t packed_b_size(int64_t N, int64_t K);
void pack_gemm_b(const GemmB& B, int64_t N, int64_t K, float* packed);
void gemm_prepacked(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* packed_b,
                    const float* bias, float* C, int64_t ldc, bool parallel = true);

}  // namespace mb::cpu
