// The cpu backend: every entry point runs the fast kernel of its op family (backend/cpu/*.h). A second
// instance runs the scalar reference kernels: the reference backend every reference run uses.
#include "backend/cpu/attention.h"
#include "backend/cpu/conv.h"
#include "backend/cpu/elementwise.h"
#include "backend/cpu/embedding.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/norm.h"
#include "backend/cpu/pool.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/rope.h"
#include "backend/cpu/shape.h"
#include "backend/cpu/softmax.h"
#include "backend/cpu/topk.h"
#include "backend/registry.h"

namespace mb {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(bool reference) : ref_(reference) {}
  const char* name() const override { return ref_ ? "cpu-reference" : "cpu"; }

  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out,
              const ops::LinearParams& p) const override {
    ref_ ? cpu::linear_ref(x, w, bias, out) : cpu::linear_fast(x, w, bias, out, p);
  }
  void linear_gathered(const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out,
                       const ops::LinearParams& p) const override {
    ref_ ? cpu::linear_gathered_ref(x, w, ids, out) : cpu::linear_gathered_fast(x, w, ids, out, p);
  }
  void linear_quantized(const Tensor& x, const ops::QuantizedMatrix& w, const Tensor* bias, Tensor& out,
                        const ops::LinearParams& p) const override {
    ref_ ? cpu::linear_quantized_ref(x, w, bias, out) : cpu::linear_quantized_fast(x, w, bias, out, p);
  }
  void linear_quantized_gathered(const Tensor& x, const ops::QuantizedMatrix& w, const Tensor& ids, Tensor& out,
                                 const ops::LinearParams& p) const override {
    ref_ ? cpu::linear_quantized_gathered_ref(x, w, ids, out) : cpu::linear_quantized_gathered_fast(x, w, ids, out, p);
  }
  void embedding_quantized(const ops::QuantizedMatrix& table, const Tensor& ids, Tensor& out, float scale) const override {
    cpu::embedding_quantized(table, ids, out, scale);  // a gather: one kernel serves as reference and fast
  }
  void embedding(const Tensor& table, const Tensor& ids, Tensor& out, float scale) const override {
    ref_ ? cpu::embedding_ref(table, ids, out, scale) : cpu::embedding_fast(table, ids, out, scale);
  }
  void topk(const Tensor& x, int64_t k, Tensor& values, Tensor& indices) const override {
    ref_ ? cpu::topk_ref(x, k, values, indices) : cpu::topk_fast(x, k, values, indices);
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                 const Tensor* q_block, const Tensor* k_block, Tensor& out,
                 const ops::AttentionParams& p) const override {
    ref_ ? cpu::attention_ref(q, k, v, q_pos, k_pos, q_block, k_block, out, p)
         : cpu::attention_fast(q, k, v, q_pos, k_pos, q_block, k_block, out, p);
  }
  void local_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& rel, float softcap,
                       Tensor& out) const override {
    ref_ ? cpu::local_attention_ref(q, k, v, rel, softcap, out) : cpu::local_attention_fast(q, k, v, rel, softcap, out);
  }
  void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
              const ops::Conv2dParams& p) const override {
    ref_ ? cpu::conv2d_ref(x, w, bias, out, p) : cpu::conv2d_fast(x, w, bias, out, p);
  }
  void depthwise_conv1d_causal(const Tensor& x, const Tensor& w, Tensor& out) const override {
    ref_ ? cpu::depthwise_conv1d_causal_ref(x, w, out) : cpu::depthwise_conv1d_causal_fast(x, w, out);
  }
  void unary(const Tensor& x, Tensor& out, const ops::UnaryParams& p) const override {
    ref_ ? cpu::unary_ref(x, out, p) : cpu::unary_fast(x, out, p);
  }
  void binary(const Tensor& a, const Tensor& b, Tensor& out, ops::BinaryKind kind) const override {
    ref_ ? cpu::binary_ref(a, b, out, kind) : cpu::binary_fast(a, b, out, kind);
  }
  void route_weights(const Tensor& w, const Tensor& ids, const Tensor& scale, Tensor& out_w,
                     Tensor& out_ids) const override {
    ref_ ? cpu::route_weights_ref(w, ids, scale, out_w, out_ids)
         : cpu::route_weights_fast(w, ids, scale, out_w, out_ids);
  }
  void index_add(Tensor& out, const Tensor& index, const Tensor& src, const Tensor* weight) const override {
    ref_ ? cpu::index_add_ref(out, index, src, weight) : cpu::index_add_fast(out, index, src, weight);
  }
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) const override {
    ref_ ? cpu::rms_norm_ref(x, weight, eps, out) : cpu::rms_norm_fast(x, weight, eps, out);
  }
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out) const override {
    ref_ ? cpu::layer_norm_ref(x, weight, bias, eps, out) : cpu::layer_norm_fast(x, weight, bias, eps, out);
  }
  void softmax(const Tensor& x, Tensor& out) const override {
    ref_ ? cpu::softmax_ref(x, out) : cpu::softmax_fast(x, out);
  }
  void avg_pool_indexed(const Tensor& x, const Tensor& index, float divisor, Tensor& out) const override {
    ref_ ? cpu::avg_pool_indexed_ref(x, index, out, divisor) : cpu::avg_pool_indexed_fast(x, index, out, divisor);
  }
  void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& out) const override {
    ref_ ? cpu::rope_ref(x, positions, inv_freq, out) : cpu::rope_fast(x, positions, inv_freq, out);
  }
  void rope_2d(const Tensor& x, const Tensor& positions, const std::vector<float>& inv_freq,
               Tensor& out) const override {
    ref_ ? cpu::rope_2d_ref(x, positions, inv_freq.data(), out) : cpu::rope_2d_fast(x, positions, inv_freq.data(), out);
  }
  void copy(const Tensor& src, Tensor& out) const override {
    ref_ ? cpu::copy_ref(src, out) : cpu::copy_fast(src, out);
  }
  void concat(const std::vector<Tensor>& tensors, int64_t dim, Tensor& out) const override {
    ref_ ? cpu::concat_ref(tensors, dim, out) : cpu::concat_fast(tensors, dim, out);
  }

 private:
  bool ref_;
};

const CpuBackend fast_kernels(false);
const CpuBackend reference_kernels(true);
const BackendRegistrar reg(fast_kernels, /*preference=*/10);

}  // namespace

const Backend& default_backend() { return fast_kernels; }
const Backend& reference_backend() { return reference_kernels; }

}  // namespace mb
