// The typed parameters of the ops, shared by the front doors (ops/*.h) and every backend's entry points
// (backend/backend.h): the one ops/ header the backend layer includes.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace mb::ops {

// quantized weights (ops/quant.h): a matrix [rows, cols] in MLX's affine format,
//   w[r, c] = scales[r, c / group_size] · q[r, c] + biases[r, c / group_size],
// q an unsigned `bits`-bit integer. Packing is the little-endian byte image of MLX's uint32 words, a bit
// stream per row with value c in bits [c·bits, (c + 1)·bits): bits = 8, one value per byte; bits = 4, two
// per byte, the even column in the low nibble. The linear kernels take 4 and 8 bits; a table that is only
// gathered (ops::embedding_quantized) may also hold MLX's other widths, 1-3, 5 and 6.
struct QuantizedMatrix {
  Tensor q;            // u8 [rows, cols · bits / 8]
  Tensor scales;       // [rows, cols / group_size] f32 / bf16 / f16
  Tensor biases;       // like scales
  int bits = 0;        // 4 or 8 (1-3, 5, 6 in a gathered table); 0 = no matrix
  int group_size = 0;  // 32, 64 or 128

  bool defined() const { return bits != 0; }
  int64_t rows() const { return q.size(0); }
  int64_t cols() const { return q.size(1) * 8 / bits; }
  // Matrix e of stacked matrices (q [E, rows, ...], scales / biases [E, rows, ...]), as views.
  QuantizedMatrix matrix(int64_t e) const {
    QuantizedMatrix m = *this;
    m.q = q.select(0, e);
    m.scales = scales.select(0, e);
    m.biases = biases.select(0, e);
    return m;
  }
};

// linear, linear_gathered (ops/linear.h) and their quantized forms (ops/quant.h): what the kernel may do,
// from the caller's Exec (ops/exec.h). Permissions and a constraint; a backend that has no use for one
// ignores it (Metal: always f32 products, and its row kernels are row-invariant whatever the flag).
struct LinearParams {
  // Dense bf16 weights: x may be rounded to bf16 and the exact bf16 products summed in f32
  // (Exec::bf16_products).
  bool bf16_products = false;
  // Quantized weights: x may be rounded per weight group to this many bits (0: f32 products; 16; 8 with
  // 4-bit weights) (Exec::int16_activations / int8_activations, ops/quant.h).
  int activation_bits = 0;
  // Each row of x must come out as it would alone (M = 1), bit for bit, whatever the number and the
  // values of the other rows: no kernel chosen by the row count (Exec::row_invariant).
  bool row_invariant = false;
};

// Value c of a packed row of `bits`-bit values. A value spans at most two bytes, and the second only when
// it straddles them, so no byte past the row's K·bits/8 is read.
inline uint32_t affine_value(const uint8_t* row, int64_t c, int bits) {
  if (bits == 8) return row[c];
  if (bits == 4) return (row[c >> 1] >> ((c & 1) * 4)) & 0x0Fu;
  const int64_t bit = c * bits, byte = bit >> 3;
  const int shift = int(bit & 7);
  uint32_t two = row[byte];
  if (shift + bits > 8) two |= uint32_t(row[byte + 1]) << 8;
  return (two >> shift) & ((1u << bits) - 1u);
}

// attention (ops/attention.h)
struct AttentionParams {
  float scale = 1.0f;    // multiplies q·k (Gemma 4 uses 1.0)
  float softcap = 0.0f;  // 0 = none; else logits = softcap·tanh(logits/softcap), before masking
  bool causal = true;
  int64_t window = 0;    // 0 = unlimited; else key allowed only if k_pos > q_pos − window (W keys incl. self)
  // false: Gemma 4 rule   allowed = valid && (causal_ok || same_block) && window_ok
  // true:  unified-12B    allowed = valid && ((causal_ok && window_ok) || same_block)
  bool block_overrides_window = false;
};

// conv2d (ops/conv.h)
struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;  // zero padding on both sides
};

// unary / binary (ops/elementwise.h)
enum class UnaryKind { GeluTanh, Silu, Relu, Sigmoid, Softplus, Softcap, Clamp, Scale };

struct UnaryParams {
  UnaryKind kind = UnaryKind::Relu;
  float a = 0.f;  // Softcap: cap (> 0); Clamp: lower bound; Scale: factor
  float b = 0.f;  // Clamp: upper bound
};

enum class BinaryKind { Add, Mul };

// The op name of a unary kind ("gelu_tanh", ..., "scale").
inline const char* unary_name(UnaryKind k) {
  switch (k) {
    case UnaryKind::GeluTanh: return "gelu_tanh";
    case UnaryKind::Silu: return "silu";
    case UnaryKind::Relu: return "relu";
    case UnaryKind::Sigmoid: return "sigmoid";
    case UnaryKind::Softplus: return "softplus";
    case UnaryKind::Softcap: return "softcap";
    case UnaryKind::Clamp: return "clamp";
    case UnaryKind::Scale: return "scale";
  }
  return "?";
}

}  // namespace mb::ops
