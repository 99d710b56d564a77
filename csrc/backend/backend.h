// The interface every backend implements (cpu, metal, metal-sim; later cuda): one entry point per op,
// the host-memory hook and synchronize. A backend registers itself (backend/registry.h) and is chosen
// once per device name; op front doors (ops/*.cpp) validate their arguments and call the entry point
// of the backend their Exec names, so adding a backend is a new folder plus its registration — no
// front door and no model code changes.
//
// Entry points receive validated arguments (ops/*.h documents each op; parameters in ops/params.h);
// concat's dim is normalised to [0, rank). Each defaults to DeviceError("<op>: no <backend> kernel yet").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/host_memory.h"
#include "core/tensor.h"
#include "ops/params.h"

namespace mb {

class Backend {
 public:
  virtual ~Backend() = default;

  // The device name it registers under ("cpu", "metal-sim", ...).
  virtual const char* name() const = 0;
  // Whether it can run here; otherwise false with the reason in *why (not built, no GPU, ...).
  virtual bool available(std::string* why) const { return true; }
  // True when ops only encode work that runs at synchronize() (Metal): outputs, and inputs that earlier
  // ops produce, are not on the host until then, so front doors skip host-side checks of such inputs.
  // False when every op has finished when its entry point returns (cpu).
  virtual bool deferred() const { return false; }
  // Commits and waits for all work encoded so far; device faults found while running are DeviceError.
  virtual void synchronize() const {}
  // The host allocator this backend needs (core/host_memory.h), installed when it registers; nullptr
  // if plain allocations suit it.
  virtual HostAllocFn host_allocator() const { return nullptr; }

  // linear (ops/linear.h)
  // (p: what the kernels may do and must keep, ops/params.h LinearParams)
  virtual void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out,
                      const ops::LinearParams& p) const;
  virtual void linear_gathered(const Tensor& x, const Tensor& w, const Tensor& ids, Tensor& out,
                               const ops::LinearParams& p) const;
  // quant (ops/quant.h)
  virtual void linear_quantized(const Tensor& x, const ops::QuantizedMatrix& w, const Tensor* bias, Tensor& out,
                                const ops::LinearParams& p) const;
  virtual void embedding_quantized(const ops::QuantizedMatrix& table, const Tensor& ids, Tensor& out, float scale) const;
  // w: stacked matrices (q [E, N, K·bits/8], scales / biases [E, N, K / group_size]).
  virtual void linear_quantized_gathered(const Tensor& x, const ops::QuantizedMatrix& w, const Tensor& ids, Tensor& out,
                                         const ops::LinearParams& p) const;
  // embedding (ops/embedding.h), topk (ops/topk.h)
  virtual void embedding(const Tensor& table, const Tensor& ids, Tensor& out, float scale) const;
  virtual void topk(const Tensor& x, int64_t k, Tensor& values, Tensor& indices) const;
  // attention (ops/attention.h)
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos,
                         const Tensor& k_pos, const Tensor* q_block, const Tensor* k_block, Tensor& out,
                         const ops::AttentionParams& p) const;
  virtual void local_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& rel, float softcap,
                               Tensor& out) const;
  // conv (ops/conv.h)
  virtual void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                      const ops::Conv2dParams& p) const;
  virtual void depthwise_conv1d_causal(const Tensor& x, const Tensor& w, Tensor& out) const;
  // elementwise (ops/elementwise.h)
  virtual void unary(const Tensor& x, Tensor& out, const ops::UnaryParams& p) const;
  virtual void binary(const Tensor& a, const Tensor& b, Tensor& out, ops::BinaryKind kind) const;
  // moe (ops/moe.h)
  virtual void route_weights(const Tensor& w, const Tensor& ids, const Tensor& scale, Tensor& out_w,
                             Tensor& out_ids) const;
  virtual void index_add(Tensor& out, const Tensor& index, const Tensor& src, const Tensor* weight) const;
  // norm (ops/norm.h), softmax (ops/softmax.h)
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out) const;
  virtual void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out) const;
  virtual void softmax(const Tensor& x, Tensor& out) const;
  // pool (ops/pool.h)
  virtual void avg_pool_indexed(const Tensor& x, const Tensor& index, float divisor, Tensor& out) const;
  // rope (ops/rope.h); rope_2d gets the d/4 frequencies the front door computed on the host
  virtual void rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& out) const;
  virtual void rope_2d(const Tensor& x, const Tensor& positions, const std::vector<float>& inv_freq,
                       Tensor& out) const;
  // shape (ops/shape.h)
  virtual void copy(const Tensor& src, Tensor& out) const;
  virtual void concat(const std::vector<Tensor>& tensors, int64_t dim, Tensor& out) const;

 protected:
  // The default of every entry point: DeviceError("<op>: no <name()> kernel yet").
  [[noreturn]] void no_kernel(const char* op) const;
};

}  // namespace mb
