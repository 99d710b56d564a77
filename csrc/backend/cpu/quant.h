// CPU kernels for ops/quant.h (affine-quantized weights). Arguments are validated by the front door.
#pragma once
#include "core/tensor.h"
#include "ops/params.h"

namespace mb::cpu {

// One f32 accumulator per output, k in order, each weight dequantized as s·q + b before its product.
void linear_quantized_ref(const Tensor& x, const ops::QuantizedMatrix& w, const Tensor* bias, Tensor& out);
// M <= 8 rows (decode, batched decode): threads over blocks of weight rows, each row read once; per group
// s·Σ q·x + b·Σ x (AVX2: bytes widened to f32 in registers; with activation_bits 16 or 8, x rounded to
// 16-bit per group and Σ q·x in int32, see ops/quant.h; 8 (4-bit weights) takes 8-bit x, vpmaddubsw on AVX2, vpdpbusd on AVX-512 VNNI).
// 9–20 rows on AVX-512 VNNI with activation_bits 16 or 8: gemv_quantized_bytes with x16 in passes of <= 8 rows.
// More rows: the blocked GEMM (gemm.h) with the weight panels dequantized as they are packed, or on
// AVX-512 VNNI with activation_bits 16 or 8, gemm_quantized_x16. p.row_invariant: any number of rows take the
// decode kernels as one row does (its activation rounding too), each row's sums its own; a non-finite x then
// sends the rows one at a time (a non-finite row takes the f32 kernels alone).
void linear_quantized_fast(const Tensor& x, const ops::QuantizedMatrix& w, const Tensor* bias, Tensor& out,
                           const ops::LinearParams& p);
// ops::linear_quantized_gathered: row r of x [R, K] through matrix ids[r] of the stacked w (q [E, N, K·bits/8],
// scales / biases [E, N, G]) into out [R, N]. ref: linear_quantized_ref per row. fast: the decode byte kernel for
// all rows at once where it applies (gemv_quantized_bytes_gathered), else linear_quantized_fast per row; either
// way each row's values are linear_quantized_fast's for that row alone.
void linear_quantized_gathered_ref(const Tensor& x, const ops::QuantizedMatrix& w, const Tensor& ids, Tensor& out);
void linear_quantized_gathered_fast(const Tensor& x, const ops::QuantizedMatrix& w, const Tensor& ids, Tensor& out,
                                    const ops::LinearParams& p);
// M > 8 rows on AVX-512 VNNI with int16_activations (backend/cpu/quant_gemm.cpp): x rounded per group as in
// the decode kernel, Σ q·x16 exact in int32 (vpdpwssd), s·dx·Σ + b·Σx per group in f32. False (nothing
// written) when it does not apply: no VNNI, a group size other than 32 / 64 / 128, or a non-finite x.
bool gemm_quantized_x16(int64_t M, const float* X, const ops::QuantizedMatrix& w, const float* bias, float* Y);

// Decode rows (any M >= 1; each row's sums its own) on AVX-512 VNNI (backend/cpu/quant_gemv_vnni.cpp), x rounded per group to x_bits 16 or 8
// (8: 4-bit weights only): the exact Σ q·xq per group from bytes (vpdpbusd; x16 split into two bytes, x8 as
// it is), each block of rows read as four sequential streams. False (nothing written) when it does not apply:
// no VNNI, a group size other than 32 / 64 / 128, a non-finite x.
bool gemv_quantized_bytes(int64_t M, const float* X, const ops::QuantizedMatrix& w, const float* bias, float* Y,
                          int x_bits);
// Row r of X [R, K] through matrix ids[r] of the stacked w (q [E, N, K·bits/8], scales / biases [E, N, G]) into
// Y [R, N], every row's blocks claimed by both threads from one counter (one pool wake for all rows); each row's
// values are gemv_quantized_bytes' for that row alone. False (nothing written) when it does not apply.
bool gemv_quantized_bytes_gathered(int64_t R, const float* X, const ops::QuantizedMatrix& w, const int32_t* ids,
                                   float* Y, int x_bits);
// Whether the decode GEMV with 16-bit x takes gemv_quantized_bytes (default on with VNNI; MARKBASE_QGEMV_BYTES=0 keeps
// the 16-bit-lane kernels); set_quant_gemv_bytes(0 / 1 / -1 = back to the environment) for tests and A/B runs.
bool quant_gemv_bytes_enabled();
void set_quant_gemv_bytes(int mode);

// Gather + dequantize (s·q + b) · scale; the reference and the fast kernel at once.
void embedding_quantized(const ops::QuantizedMatrix& table, const Tensor& ids, Tensor& out, float scale);

// f32 values s·q + b of row r, columns [c0, c0 + n), into dst (any MLX width: ops::affine_value).
void dequantize_row(const ops::QuantizedMatrix& m, int64_t r, int64_t c0, int64_t n, float* dst);
// The same for the GEMM packer: on AVX-512, 16 columns per step with one rounding (s·q + b as an FMA), so a
// value may differ from dequantize_row's (two roundings) in its last bit.
void dequantize_row_fast(const ops::QuantizedMatrix& m, int64_t r, int64_t c0, int64_t n, float* dst);

// x row rounded for the 16-bit kernels: per group dx = max|x| / 32767 and x16 = rint(x / dx) in ±32767
// (deinterleave: even columns first, then odd, the 4-bit GEMV's nibble order), and xsum = Σ x per group
// (the biases' factor, summed in double then rounded). Vectorized on AVX-512 (the same values). False for a
// NaN / infinity.
bool round_x16(const float* x, int64_t K, int gs, bool deinterleave, int16_t* x16, float* dx, float* xsum);

}  // namespace mb::cpu
