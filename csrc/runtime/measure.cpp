#include "runtime/measure.h"

#include <memory>

#include "core/errors.h"

namespace mb::runtime {

namespace {

class MeasureBackend final : public Backend {
 public:
  const char* name() const override { return "measure"; }
  // Outputs are never produced: front doors must not read inputs on the host (index checks).
  bool deferred() const override { return true; }
  void linear(const Tensor&, const Tensor&, const Tensor*, Tensor&, const ops::LinearParams&) const override {}
  void linear_gathered(const Tensor&, const Tensor&, const Tensor&, Tensor&, const ops::LinearParams&) const override {}
  void linear_quantized(const Tensor&, const ops::QuantizedMatrix&, const Tensor*, Tensor&,
                        const ops::LinearParams&) const override {}
  void linear_quantized_gathered(const Tensor&, const ops::QuantizedMatrix&, const Tensor&, Tensor&,
                                 const ops::LinearParams&) const override {}
  void embedding_quantized(const ops::QuantizedMatrix&, const Tensor&, Tensor&, float) const override {}
  void embedding(const Tensor&, const Tensor&, Tensor&, float) const override {}
  void topk(const Tensor&, int64_t, Tensor&, Tensor&) const override {}
  void attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor*,
                 const Tensor*, Tensor&, const ops::AttentionParams&) const override {}
  void local_attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, float, Tensor&) const override {}
  void conv2d(const Tensor&, const Tensor&, const Tensor&, Tensor&, const ops::Conv2dParams&) const override {}
  void depthwise_conv1d_causal(const Tensor&, const Tensor&, Tensor&) const override {}
  void unary(const Tensor&, Tensor&, const ops::UnaryParams&) const override {}
  void binary(const Tensor&, const Tensor&, Tensor&, ops::BinaryKind) const override {}
  void route_weights(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) const override {}
  void index_add(Tensor&, const Tensor&, const Tensor&, const Tensor*) const override {}
  void rms_norm(const Tensor&, const Tensor&, float, Tensor&) const override {}
  void layer_norm(const Tensor&, const Tensor&, const Tensor&, float, Tensor&) const override {}
  void softmax(const Tensor&, Tensor&) const override {}
  void avg_pool_indexed(const Tensor&, const Tensor&, float, Tensor&) const override {}
  void rope(const Tensor&, const Tensor&, const Tensor&, Tensor&) const override {}
  void rope_2d(const Tensor&, const Tensor&, const std::vector<float>&, Tensor&) const override {}
  void copy(const Tensor&, Tensor&) const override {}
  void concat(const std::vector<Tensor>&, int64_t, Tensor&) const override {}
};

}  // namespace

const Backend& measure_backend() {
  static const MeasureBackend instance;
  return instance;
}

size_t measure_arena_bytes(FunctionRef<void(Arena& activations, Arena& outputs)> pass) {
  // Address space only (nothing is committed), reserved as needed: each arena starts small and the one a
  // pass exhausts doubles for the next try, so a pass reserves at most about twice what it uses (a fixed
  // 16 GiB each failed under `ulimit -v` of a few GB).
  constexpr size_t kFirstReserve = size_t(64) << 20, kMaxReserve = size_t(1) << 44;
  size_t act_reserve = kFirstReserve, out_reserve = kFirstReserve;
  for (;;) {
    std::unique_ptr<Arena> activations = Arena::address_space(act_reserve);
    std::unique_ptr<Arena> outputs = Arena::address_space(out_reserve);
    try {
      pass(*activations, *outputs);
    } catch (const MarkbaseError&) {
      const bool grow_act = activations->exhausted() && act_reserve < kMaxReserve;
      const bool grow_out = outputs->exhausted() && out_reserve < kMaxReserve;
      if (!grow_act && !grow_out) throw;
      if (grow_act) act_reserve *= 2;
      if (grow_out) out_reserve *= 2;
      continue;
    }
    return activations->high_water() + 4096;  // slack for alignment
  }
}

}  // namespace mb::runtime
