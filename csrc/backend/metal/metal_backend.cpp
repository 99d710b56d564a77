// The metal and metal-sim backends: one class over the shared dispatch code (backend/metal/*_dispatch.h),
// differing only in their KernelLauncher. Both are always registered; available() says why one cannot
// run here (metal-sim without clang 22 at build time, metal off macOS or without a GPU).
#include "backend/metal/attention_dispatch.h"
#include "backend/metal/quant_dispatch.h"
#include "backend/metal/conv_dispatch.h"
#include "backend/metal/elementwise_dispatch.h"
#include "backend/metal/embedding_dispatch.h"
#include "backend/metal/launcher_mtl.h"
#include "backend/metal/launcher_sim.h"
#include "backend/metal/linear_dispatch.h"
#include "backend/metal/moe_dispatch.h"
#include "backend/metal/norm_dispatch.h"
#include "backend/metal/pool_dispatch.h"
#include "backend/metal/rope_dispatch.h"
#include "backend/metal/shape_dispatch.h"
#include "backend/metal/softmax_dispatch.h"
#include "backend/metal/topk_dispatch.h"
#include "backend/registry.h"

namespace mb::metal {
namespace {

// How a Metal backend finds its launcher and whether it can run here.
struct LauncherSource {
  const char* name;
  KernelLauncher& (*launcher)();
  bool (*available)(std::string* why);
  HostAllocFn (*host_allocator)();
};

class MetalBackend final : public Backend {
 public:
  explicit MetalBackend(LauncherSource src) : src_(src) {}
  const char* name() const override { return src_.name; }
  bool available(std::string* why) const override { return src_.available(why); }
  bool deferred() const override { return true; }  // dispatches run when the command buffer is committed
  void synchronize() const override { L().synchronize(); }
  HostAllocFn host_allocator() const override { return src_.host_allocator(); }

  // Always f32 products (bf16_products is a permission; the CPU takes it where it is faster). row_invariant:
  // the matvec kernel for any row count (metal::linear).
  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out,
              const ops::LinearParams& p) const override {
    metal::linear(L(), x, w, bias, out, p.row_invariant);
  }
  // (one matvec per row: row-invariant whatever p says)
  void linear_gathered(const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out,
                       const ops::LinearParams&) const override {
    metal::linear_gathered(L(), x, w, ids, out);
  }
  void embedding(const Tensor& table, const Tensor& ids, Tensor& out, float scale) const override {
    metal::embedding(L(), table, ids, out, scale);
  }
  void topk(const Tensor& x, int64_t k, Tensor& values, Tensor& indices) const override {
    metal::topk(L(), x, k, values, indices);
  }
  // Always f32 products (activation_bits is a permission, and the GPU's GEMV is not compute-bound).
  void linear_quantized(const Tensor& x, const ops::QuantizedMatrix& w, const Tensor* bias, Tensor& out,
                        const ops::LinearParams& p) const override {
    metal::linear_quantized(L(), x, w, bias, out, p.row_invariant);
  }
  void linear_quantized_gathered(const Tensor& x, const ops::QuantizedMatrix& w, const Tensor& ids, Tensor& out,
                                 const ops::LinearParams&) const override {
    metal::linear_quantized_gathered(L(), x, w, ids, out);
  }
  void embedding_quantized(const ops::QuantizedMatrix& table, const Tensor& ids, Tensor& out, float scale) const override {
    metal::embedding_quantized(L(), table, ids, out, scale);
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos, const Tensor& k_pos,
                 const Tensor* q_block, const Tensor* k_block, Tensor& out,
                 const ops::AttentionParams& p) const override {
    metal::attention(L(), q, k, v, q_pos, k_pos, q_block, k_block, out, p);
  }
  void local_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& rel, float softcap,
                       Tensor& out) const override {
    metal::local_attention(L(), q, k, v, rel, softcap, out);
  }
  void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
              const ops::Conv2dParams& p) const override {
    metal::conv2d(L(), x, w, bias, out, p);
  }
  void depthwise_conv1d_causal(const Tensor& x, const Tensor& w, Tensor& out) const override {
    metal::depthwise_conv1d_causal(L(), x, w, out);
  }
  void unary(const Tensor& x, Tensor& out, const ops::UnaryParams& p) const override { metal::unary(L(), x, out, p); }
  void binary(const Tensor& a, const Tensor& b, Tensor& out, ops::BinaryKind kind) const override {
    metal::binary(L(), a, b, out, kind);
  }
  void route_weights(const Tensor& w, const Tensor& ids, const Tensor& scale, Tensor& out_w,
                     Tensor& out_ids) const override {
    metal::route_weights(L(), w, ids, scale, out_w, out_ids);
  }
  void index_add(Tensor& out, const Tensor& index, const Tensor& src, const Tensor* weight) const override {
    metal::index_add(L(), out, index, src, weight);
  }
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) const override {
    metal::rms_norm(L(), x, weight, eps, out);
  }
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out) const override {
    metal::layer_norm(L(), x, weight, bias, eps, out);
  }
  void softmax(const Tensor& x, Tensor& out) const override { metal::softmax(L(), x, out); }
  void avg_pool_indexed(const Tensor& x, const Tensor& index, float divisor, Tensor& out) const override {
    metal::avg_pool_indexed(L(), x, index, divisor, out);
  }
  void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& out) const override {
    metal::rope(L(), x, positions, inv_freq, out);
  }
  void rope_2d(const Tensor& x, const Tensor& positions, const std::vector<float>& inv_freq,
               Tensor& out) const override {
    metal::rope_2d(L(), x, positions, inv_freq, out);
  }
  void copy(const Tensor& src, Tensor& out) const override { metal::copy(L(), src, out); }
  void concat(const std::vector<Tensor>& tensors, int64_t dim, Tensor& out) const override {
    metal::concat(L(), tensors, dim, out);
  }

 private:
  KernelLauncher& L() const { return src_.launcher(); }
  LauncherSource src_;
};

KernelLauncher& sim() { return sim_launcher(); }

bool sim_available(std::string* why) {
  if (metal_sim_built()) return true;
  if (why) *why = "this markbase was built without metal-sim (it needs clang 22 or newer at build time)";
  return false;
}

HostAllocFn no_host_allocator() { return nullptr; }

// A real GPU is preferred to cpu; the simulator (a test vehicle, slower than cpu) comes after it.
const MetalBackend gpu_backend({"metal", mtl_launcher, mtl_available, mtl_host_allocator});
const MetalBackend sim_backend({"metal-sim", sim, sim_available, no_host_allocator});
const BackendRegistrar reg_gpu(gpu_backend, /*preference=*/0);
const BackendRegistrar reg_sim(sim_backend, /*preference=*/20);

}  // namespace
}  // namespace mb::metal
