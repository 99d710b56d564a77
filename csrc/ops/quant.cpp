#include "ops/quant.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/host_memory.h"
#include "core/thread_pool.h"
#include "ops/check.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/run_op.h"

namespace mb::ops {

namespace {

// f(tag) with tag the storage type of a float dtype (the host-side tools below read and write any).
template <class F>
void with_float_type(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); break;
    case DType::BF16: f(bf16_t{}); break;
    case DType::F16: f(f16_t{}); break;
    default: throw InputError(cat("internal: not a float dtype: ", dtype_name(t)));
  }
}

}  // namespace

void check_quantized(const QuantizedMatrix& m, const char* op, const char* what, bool any_mlx_width) {
  Check c{op};
  if (any_mlx_width && (m.bits < 1 || m.bits > 8 || m.bits == 7))
    c.fail(cat(what, ": bits must be one of MLX's affine widths 1-6 or 8, got ", m.bits));
  if (!any_mlx_width && m.bits != 4 && m.bits != 8) c.fail(cat(what, ": bits must be 4 or 8, got ", m.bits));
  if (m.group_size != 32 && m.group_size != 64 && m.group_size != 128)
    c.fail(cat(what, ": group_size must be 32, 64 or 128, got ", m.group_size));
  const std::string qn = cat(what, ".q"), sn = cat(what, ".scales"), bn = cat(what, ".biases");
  c.rank(m.q, qn.c_str(), 2);
  c.dtype(m.q, qn.c_str(), {DType::U8});
  c.contiguous(m.q, qn.c_str());
  const int64_t rows = m.q.size(0), cols = m.q.size(1) * 8 / m.bits;
  if (m.q.size(1) * 8 % m.bits) c.fail(cat(qn, " ", m.q.describe(), ": rows are not a whole number of ", m.bits, "-bit values"));
  if (cols % m.group_size)
    c.fail(cat(what, ": ", cols, " columns are not a whole number of groups of ", m.group_size));
  c.rank(m.scales, sn.c_str(), 2);
  c.dtype(m.scales, sn.c_str(), {DType::F32, DType::BF16, DType::F16});
  c.contiguous(m.scales, sn.c_str());
  if (m.scales.size(0) != rows || m.scales.size(1) != cols / m.group_size)
    c.fail(cat(sn, " ", m.scales.describe(), " must be [", rows, ", ", cols / m.group_size, "] for ", qn, " ",
               m.q.describe(), " (", m.bits, "-bit, groups of ", m.group_size, ")"));
  c.contiguous(m.biases, bn.c_str());
  if (m.biases.shape() != m.scales.shape() || m.biases.dtype() != m.scales.dtype())
    c.fail(cat(bn, " ", m.biases.describe(), " must match ", sn, " ", m.scales.describe()));
}

QuantizedMatrix quantize_affine(const Tensor& w, int bits, int group_size, DType scale_dtype) {
  Check c{"quantize"};
  c.rank(w, "w", 2);
  c.dtype(w, "w", {DType::F32, DType::BF16, DType::F16});
  c.contiguous(w, "w");
  if (bits != 4 && bits != 8) c.fail(cat("bits must be 4 or 8, got ", bits));
  if (group_size != 32 && group_size != 64 && group_size != 128)
    c.fail(cat("group_size must be 32, 64 or 128, got ", group_size));
  if (scale_dtype != DType::F32 && scale_dtype != DType::BF16 && scale_dtype != DType::F16)
    c.fail(cat("scales must be stored as f32, bf16 or f16, got ", dtype_name(scale_dtype)));
  const int64_t R = w.size(0), C = w.size(1);
  if (C % group_size) c.fail(cat("w ", w.describe(), ": ", C, " columns are not a multiple of group_size ", group_size));
  const int64_t G = C / group_size;
  QuantizedMatrix m;
  m.bits = bits;
  m.group_size = group_size;
  // q, scales and biases in one allocation: a decode step streams all three, and host_alloc gives a block of
  // 4 MiB or more 2 MiB pages, where separate small scale / bias blocks would sit on 4 KiB pages.
  const size_t q_bytes = size_t(R * C * bits / 8), s_bytes = size_t(R * G) * dtype_itemsize(scale_dtype);
  const size_t s_at = (q_bytes + 63) / 64 * 64, b_at = s_at + (s_bytes + 63) / 64 * 64;
  std::shared_ptr<void> block = host_alloc(std::max<size_t>(b_at + s_bytes, 64));  // (an empty matrix too)
  if (!block) throw MarkbaseError(cat("quantize: out of memory for a ", w.describe(), " matrix at ", bits, " bits"));
  uint8_t* base = static_cast<uint8_t*>(block.get());
  m.q = Tensor::wrap_contiguous(base, DType::U8, {R, C * bits / 8}, block, StorageKind::Owned);
  m.scales = Tensor::wrap_contiguous(base + s_at, scale_dtype, {R, G}, block, StorageKind::Owned);
  m.biases = Tensor::wrap_contiguous(base + b_at, scale_dtype, {R, G}, block, StorageKind::Owned);
  const float n_bins = float((1 << bits) - 1), eps = 1e-7f;
  with_float_type(w.dtype(), [&](auto wtag) {
    using WT = decltype(wtag);
    with_float_type(scale_dtype, [&](auto stag) {
      using ST = decltype(stag);
      const WT* src = w.data_as<const WT>();
      uint8_t* qs = m.q.data_as<uint8_t>();
      ST* scales = m.scales.data_as<ST>();
      ST* biases = m.biases.data_as<ST>();
      parallel_for(R, std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(C, 1)), [&](int64_t r0, int64_t r1) {
        float vals[128];
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t g = 0; g < G; ++g) {
            float lo = std::numeric_limits<float>::infinity(), hi = -lo;
            for (int j = 0; j < group_size; ++j) {
              vals[j] = load_f32(src + r * C + g * group_size + j);
              lo = std::min(lo, vals[j]);
              hi = std::max(hi, vals[j]);
            }
            const bool min_heavier = std::abs(lo) > std::abs(hi);
            float scale = std::max((hi - lo) / n_bins, eps);
            scale = min_heavier ? scale : -scale;
            const float edge = min_heavier ? lo : hi;
            const float q0 = std::rint(edge / scale);
            float bias = 0.f;
            if (q0 != 0.f) {
              scale = edge / q0;
              bias = edge;
            }
            uint8_t* row = qs + r * (C * bits / 8) + g * group_size * bits / 8;
            for (int j = 0; j < group_size; ++j) {
              const float qv = std::min(std::max(std::rint((vals[j] - bias) / scale), 0.f), n_bins);
              const uint32_t u = uint32_t(qv);
              if (bits == 8) {
                row[j] = uint8_t(u);
              } else if (j & 1) {
                row[j >> 1] = uint8_t(row[j >> 1] | (u << 4));
              } else {
                row[j >> 1] = uint8_t(u);
              }
            }
            store_f32(scales + r * G + g, scale);
            store_f32(biases + r * G + g, bias);
          }
      });
    });
  });
  return m;
}

int held_affine_bits(int bits) {
  if (bits < 1 || bits > 8 || bits == 7) throw InputError(cat("widen_affine_bits: MLX's affine widths are 1-6 and 8, got ", bits));
  return bits <= 4 ? 4 : 8;
}

Tensor widen_affine_bits(const Tensor& packed, int64_t K, int bits) {
  Check c{"widen_affine_bits"};
  const int held = held_affine_bits(bits);
  c.dtype(packed, "packed", {DType::U8});
  c.contiguous(packed, "packed");
  if (packed.dim() < 1 || K < 1 || K * bits % 8 || K * held % 8 || packed.size(-1) != K * bits / 8)
    c.fail(cat("packed ", packed.describe(), " does not hold rows of ", K, " ", bits, "-bit values"));
  Shape shape = packed.shape();
  shape.back() = K * held / 8;
  Tensor out = Tensor::empty(DType::U8, shape);
  const int64_t rows = packed.numel() / packed.size(-1), in_bytes = packed.size(-1), out_bytes = shape.back();
  const uint8_t* src = packed.data_as<const uint8_t>();
  uint8_t* dst = out.data_as<uint8_t>();
  parallel_for(rows, std::max<int64_t>(1, (1 << 20) / std::max<int64_t>(1, K)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* in = src + r * in_bytes;
      uint8_t* o = dst + r * out_bytes;
      auto value = [&](int64_t col) { return affine_value(in, col, bits); };
      if (held == 8)
        for (int64_t col = 0; col < K; ++col) o[col] = uint8_t(value(col));
      else
        for (int64_t col = 0; col < K; col += 2) o[col / 2] = uint8_t(value(col) | value(col + 1) << 4);
    }
  });
  return out;
}

Tensor dequantize_affine(const QuantizedMatrix& m) {
  check_quantized(m, "dequantize", "w", /*any_mlx_width=*/true);
  const int64_t R = m.rows(), C = m.cols(), G = C / m.group_size, row_bytes = m.q.size(1);
  Tensor out = Tensor::empty(DType::F32, {R, C});
  with_float_type(m.scales.dtype(), [&](auto stag) {
    using ST = decltype(stag);
    const ST* scales = m.scales.data_as<const ST>();
    const ST* biases = m.biases.data_as<const ST>();
    for (int64_t r = 0; r < R; ++r) {
      const uint8_t* row = m.q.data_as<const uint8_t>() + r * row_bytes;
      for (int64_t c = 0; c < C; ++c) {
        const int64_t g = c / m.group_size;
        out.data_as<float>()[r * C + c] =
            load_f32(scales + r * G + g) * float(affine_value(row, c, m.bits)) + load_f32(biases + r * G + g);
      }
    }
  });
  return out;
}

int activation_bits(const Exec& ex, const QuantizedMatrix& w) {
  if (ex.int8_activations) return w.bits == 4 ? 8 : 16;  // 8-bit weights keep 16-bit x (see exec.h)
  return ex.int16_activations ? 16 : 0;
}

LinearParams linear_params(const Exec& ex, const QuantizedMatrix& w) {
  LinearParams p = linear_params(ex);
  p.activation_bits = activation_bits(ex, w);
  return p;
}

void linear_quantized(const Tensor& x, const QuantizedMatrix& w, const Tensor* bias, Tensor& out, const Exec& ex) {
  Check c{"linear_quantized"};
  check_quantized(w, c.op, "w");
  c.dtype(x, "x", {DType::F32});
  if (x.dim() < 1) c.fail(cat("x must have at least 1 dimension [..., K], got ", x.describe()));
  c.contiguous(x, "x");
  const int64_t K = x.size(-1), N = w.rows();
  if (w.cols() != K)
    c.fail(cat("w holds ", w.rows(), " × ", w.cols(), " values; x ", x.describe(), " needs ", K, " columns"));
  c.linear_bias(bias, N);
  Shape out_shape = x.shape();
  out_shape.back() = N;
  c.output(out, "out", out_shape, DType::F32);
  c.no_alias(out, "out", x, "x");
  c.no_alias(out, "out", w.q, "w.q");
  if (bias) c.no_alias(out, "out", *bias, "bias");
  run_op(c.op, ex, {&x, &w.q, &w.scales, &w.biases, bias}, {&out},
         [&](const Backend& b) { b.linear_quantized(x, w, bias, out, linear_params(ex, w)); });
}

void linear_quantized_gathered(const Tensor& x, const QuantizedMatrix& w, const Tensor& ids, Tensor& out,
                               const Exec& ex) {
  Check c{"linear_quantized_gathered"};
  c.rank(w.q, "w.q", 3);
  c.rank(w.scales, "w.scales", 3);
  c.rank(w.biases, "w.biases", 3);
  const int64_t E = w.q.size(0);
  if (E < 1) c.fail(cat("w.q ", w.q.describe(), " holds no matrices"));
  if (w.scales.size(0) != E || w.biases.size(0) != E)
    c.fail(cat("w.scales ", w.scales.describe(), " and w.biases ", w.biases.describe(), " must hold the ", E,
               " matrices of w.q ", w.q.describe()));
  const QuantizedMatrix first = w.matrix(0);  // every matrix has the shapes of the first
  check_quantized(first, c.op, "w[0]");
  c.contiguous(w.q, "w.q");
  c.contiguous(w.scales, "w.scales");
  c.contiguous(w.biases, "w.biases");
  c.rank(x, "x", 2);
  c.dtype(x, "x", {DType::F32});
  c.contiguous(x, "x");
  c.rank(ids, "ids", 1);
  c.dtype(ids, "ids", {DType::I32});
  c.contiguous(ids, "ids");
  const int64_t R = x.size(0), K = x.size(1), N = first.rows();
  if (first.cols() != K)
    c.fail(cat("w's matrices hold ", N, " × ", first.cols(), " values; x ", x.describe(), " needs ", K, " columns"));
  c.size(ids, "ids", 0, R, "one matrix index per row of x");
  c.output(out, "out", {R, N}, DType::F32);
  c.no_alias(out, "out", x, "x");
  c.no_alias(out, "out", w.q, "w.q");
  c.no_alias(out, "out", ids, "ids");
  run_op(c.op, ex, {&x, &w.q, &w.scales, &w.biases, &ids}, {&out}, [&](const Backend& b) {
    if (!b.deferred()) c.indices_in_range(ids, "ids", E, "w's matrices");
    b.linear_quantized_gathered(x, w, ids, out, linear_params(ex, w));
  });
}

void embedding_quantized(const QuantizedMatrix& table, const Tensor& ids, Tensor& out, float scale, const Exec& ex) {
  Check c{"embedding_quantized"};
  check_quantized(table, c.op, "table", /*any_mlx_width=*/true);
  c.rank(ids, "ids", 1);
  c.dtype(ids, "ids", {DType::I32});
  c.contiguous(ids, "ids");
  c.output(out, "out", {ids.size(0), table.cols()}, DType::F32);
  c.no_alias(out, "out", table.q, "table.q");
  c.no_alias(out, "out", ids, "ids");
  run_op(c.op, ex, {&table.q, &table.scales, &table.biases, &ids}, {&out}, [&](const Backend& b) {
    if (!b.deferred()) c.indices_in_range(ids, "ids", table.rows(), "the table's rows");
    b.embedding_quantized(table, ids, out, scale);
  });
}

size_t LinearWeight::nbytes() const {
  if (quantized()) return quant.q.nbytes() + quant.scales.nbytes() + quant.biases.nbytes();
  return dense.defined() ? dense.nbytes() : 0;
}

LinearWeight LinearWeight::expert(int64_t e) const {
  LinearWeight w;
  if (!quantized()) {
    w.dense = dense.select(0, e);
    return w;
  }
  w.quant = quant.matrix(e);
  return w;
}

void linear(const Tensor& x, const LinearWeight& w, const Tensor* bias, Tensor& out, const Exec& ex) {
  if (w.quantized()) linear_quantized(x, w.quant, bias, out, ex);
  else linear(x, w.dense, bias, out, ex);
}

void linear_gathered(const Tensor& x, const LinearWeight& w, const Tensor& ids, Tensor& out, const Exec& ex) {
  if (w.quantized()) linear_quantized_gathered(x, w.quant, ids, out, ex);
  else linear_gathered(x, w.dense, ids, out, ex);
}

void embedding(const LinearWeight& table, const Tensor& ids, Tensor& out, float scale, const Exec& ex) {
  if (table.quantized()) embedding_quantized(table.quant, ids, out, scale, ex);
  else embedding(table.dense, ids, out, scale, ex);
}

}  // namespace mb::ops
