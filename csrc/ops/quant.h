// Quantized weights: MLX's affine format (ops/params.h: QuantizedMatrix), the quantizer that makes it
// (MLX's algorithm, so a checkpoint written here loads in MLX and the reverse), and the ops that read it:
// a linear layer and an embedding gather. Activations f32; every product and sum in f32 unless an Exec allows
// 16-bit activations (linear_quantized).
#pragma once
#include "core/tensor.h"
#include "ops/exec.h"
#include "ops/params.h"

namespace mb::ops {

// Quantizes w [rows, cols] (f32 / bf16 / f16, host memory) group by group along cols, as mlx.core.quantize:
//   scale = max((max − min) / (2^bits − 1), 1e-7), negated unless |min| > |max|; edge = the larger-magnitude
//   extreme; q0 = rint(edge / scale); if q0 ≠ 0: scale = edge / q0, bias = edge, else bias = 0;
//   q = clamp(rint((w − bias) / scale), 0, 2^bits − 1)     (f32 math, scale and bias unrounded)
// then scales and biases are stored as `scale_dtype` (MLX keeps the weight's dtype). bits 4 or 8,
// group_size 32, 64 or 128 dividing cols. The result owns new host memory.
QuantizedMatrix quantize_affine(const Tensor& w, int bits, int group_size, DType scale_dtype);

// MLX's other affine widths (1, 2, 3, 5 and 6 bits; 4 and 8 are the kernels' own) held at the width the
// kernels take: a stored row is a little-endian bit stream, value c in bits [c·bits, (c + 1)·bits) of its
// K·bits/8 bytes (MLX's packing for every width). packed: u8 [.., K·bits/8] (host memory); returns new u8
// [.., K·held/8] with held = held_affine_bits(bits) — nibbles (low one first) or bytes, every value unchanged,
// so s·q + b and every product with it are exactly those of the stored matrix.
int held_affine_bits(int bits);
Tensor widen_affine_bits(const Tensor& packed, int64_t K, int bits);

// f32 [rows, cols] = scales · q + biases (host memory, for tests and tools; any MLX width).
Tensor dequantize_affine(const QuantizedMatrix& m);

// Checks a QuantizedMatrix's shapes and dtypes against each other (InputError naming `what`): 4 or 8 bits,
// or with any_mlx_width every width MLX writes (1-6, 8; what a gather reads).
void check_quantized(const QuantizedMatrix& m, const char* op, const char* what, bool any_mlx_width = false);

// The rounding ex allows the activations of products with w: 0 (f32), 16 or 8 bits (Backend::linear_quantized).
int activation_bits(const Exec& ex, const QuantizedMatrix& w);
// What ex lets the linear kernels with quantized w do (linear_params(ex) with activation_bits(ex, w)).
LinearParams linear_params(const Exec& ex, const QuantizedMatrix& w);

// out = x · Wᵀ (+ bias) with W the dequantized matrix [N, K]:
//   x: [..., K] f32 contiguous; bias: [N] f32 / bf16 / f16 or null; out: [..., N] f32, not overlapping.
// Σ_k x·(s·q + b) is computed per group as s·Σ q·x + b·Σ x in f32 (the reference dequantizes first;
// the two agree to f32 rounding). With ex.int16_activations the CPU kernels (x with ≤ 8 rows on AVX2, more
// rows on AVX-512 VNNI) may instead round x per group to 16-bit integers, x ≈ dx·xq with dx = max|x_g| / 32767, and form Σ q·xq
// exactly in int32: each x moves by at most max|x_g|·2⁻¹⁶ (far below the 4- / 8-bit weights' own
// rounding), for half the instructions per weight (on AVX-512 VNNI the decode rows take xq as two bytes
// through vpdpbusd: the same integers, backend/cpu/quant_gemv_vnni.cpp). Σ x stays f32; other backends and shapes ignore it.
// With ex.int8_activations the decode rows with 4-bit weights on AVX2 / AVX-512 VNNI round x per group to 8-bit
// integers instead (dx = max|x_g| / 127, llama.cpp's Q8 activations: each x moves by up to max|x_g|·2⁻⁸,
// two vpdpbusd per 128 weights instead of four on VNNI, three multiplies per 64 weights instead of four on AVX2);
// everything else as with int16_activations.
void linear_quantized(const Tensor& x, const QuantizedMatrix& w, const Tensor* bias, Tensor& out, const Exec& ex = {});

// out[r] = x[r] · W_{ids[r]}ᵀ: each row of x through the matrix its id selects among E stacked ones, as
// linear_quantized computes that row alone (with ex's activation rounding; no bias):
//   x: [R, K] f32 contiguous; w: q [E, N, K·bits/8], scales / biases [E, N, K / group_size]; ids: [R] i32 in
//   [0, E) (checked on the host where ids are; a deferred backend writes a zero row for a bad id); out: [R, N] f32.
// On the CPU the decode kernel reads every row's matrix in one call (one wake of the thread pool for a MoE
// layer's top-k experts instead of one per expert).
void linear_quantized_gathered(const Tensor& x, const QuantizedMatrix& w, const Tensor& ids, Tensor& out,
                               const Exec& ex = {});

// out[t] = dequantized row ids[t] of table · scale: ids [T] i32 in [0, rows); out [T, cols] f32. The table may
// hold any MLX width (1-6 or 8 bits): a gather reads the stored bit stream as it is (the PLE table of an MLX
// checkpoint stays a lazily touched mapping at its stored width).
void embedding_quantized(const QuantizedMatrix& table, const Tensor& ids, Tensor& out, float scale,
                         const Exec& ex = {});

// A weight matrix as a model holds it: dense (any float dtype) or quantized. Model code passes these
// to the two overloads below and never asks which it is.
struct LinearWeight {
  Tensor dense;           // [N, K], or undefined when quantized
  QuantizedMatrix quant;  // or bits == 0 when dense

  bool defined() const { return dense.defined() || quant.defined(); }
  bool quantized() const { return quant.defined(); }
  int64_t rows() const { return quantized() ? quant.rows() : dense.size(0); }
  int64_t cols() const { return quantized() ? quant.cols() : dense.size(1); }
  // The dtype the matrix was stored in before quantizing (MLX keeps scales in it).
  DType dtype() const { return quantized() ? quant.scales.dtype() : dense.dtype(); }
  // Matrix e of stacked experts ([E, N, K] dense, or q / scales / biases with a leading E).
  LinearWeight expert(int64_t e) const;
  // Bytes of weight data (packed values plus scales and biases when quantized).
  size_t nbytes() const;
};

void linear(const Tensor& x, const LinearWeight& w, const Tensor* bias, Tensor& out, const Exec& ex = {});
// w: stacked matrices ([E, N, K] dense, or quantized with a leading E): ops::linear_gathered or
// linear_quantized_gathered.
void linear_gathered(const Tensor& x, const LinearWeight& w, const Tensor& ids, Tensor& out, const Exec& ex = {});
void embedding(const LinearWeight& table, const Tensor& ids, Tensor& out, float scale, const Exec& ex = {});

}  // namespace mb::ops
