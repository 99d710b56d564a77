#include "backend/backend.h"

#include "core/errors.h"

namespace mb {

void Backend::no_kernel(const char* op) const { throw DeviceError(cat(op, ": no ", name(), " kernel yet")); }

void Backend::linear(const Tensor&, const Tensor&, const Tensor*, Tensor&, const ops::LinearParams&) const {
  no_kernel("linear");
}
void Backend::linear_gathered(const Tensor&, const Tensor&, const Tensor&, Tensor&, const ops::LinearParams&) const {
  no_kernel("linear_gathered");
}
void Backend::linear_quantized(const Tensor&, const ops::QuantizedMatrix&, const Tensor*, Tensor&,
                               const ops::LinearParams&) const {
  no_kernel("linear_quantized");
}
void Backend::linear_quantized_gathered(const Tensor&, const ops::QuantizedMatrix&, const Tensor&, Tensor&,
                                        const ops::LinearParams&) const {
  no_kernel("linear_quantized_gathered");
}
void Backend::embedding_quantized(const ops::QuantizedMatrix&, const Tensor&, Tensor&, float) const {
  no_kernel("embedding_quantized");
}
void Backend::embedding(const Tensor&, const Tensor&, Tensor&, float) const { no_kernel("embedding"); }
void Backend::topk(const Tensor&, int64_t, Tensor&, Tensor&) const { no_kernel("topk"); }
void Backend::attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor*,
                        const Tensor*, Tensor&, const ops::AttentionParams&) const {
  no_kernel("attention");
}
void Backend::local_attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, float, Tensor&) const {
  no_kernel("local_attention");
}
void Backend::conv2d(const Tensor&, const Tensor&, const Tensor&, Tensor&, const ops::Conv2dParams&) const {
  no_kernel("conv2d");
}
void Backend::depthwise_conv1d_causal(const Tensor&, const Tensor&, Tensor&) const {
  no_kernel("depthwise_conv1d_causal");
}
void Backend::unary(const Tensor&, Tensor&, const ops::UnaryParams& p) const { no_kernel(ops::unary_name(p.kind)); }
void Backend::binary(const Tensor&, const Tensor&, Tensor&, ops::BinaryKind kind) const {
  no_kernel(kind == ops::BinaryKind::Add ? "add" : "mul");
}
void Backend::route_weights(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) const {
  no_kernel("route_weights");
}
void Backend::index_add(Tensor&, const Tensor&, const Tensor&, const Tensor*) const { no_kernel("index_add"); }
void Backend::rms_norm(const Tensor&, const Tensor&, float, Tensor&) const { no_kernel("rms_norm"); }
void Backend::layer_norm(const Tensor&, const Tensor&, const Tensor&, float, Tensor&) const { no_kernel("layer_norm"); }
void Backend::softmax(const Tensor&, Tensor&) const { no_kernel("softmax"); }
void Backend::avg_pool_indexed(const Tensor&, const Tensor&, float, Tensor&) const { no_kernel("avg_pool_indexed"); }
void Backend::rope(const Tensor&, const Tensor&, const Tensor&, Tensor&) const { no_kernel("rope"); }
void Backend::rope_2d(const Tensor&, const Tensor&, const std::vector<float>&, Tensor&) const { no_kernel("rope_2d"); }
void Backend::copy(const Tensor&, Tensor&) const { no_kernel("copy"); }
void Backend::concat(const std::vector<Tensor>&, int64_t, Tensor&) const { no_kernel("concat"); }

}  // namespace mb
