#include "models/gemma4/weights.h"

#include <mutex>

#include "core/errors.h"
#include "io/checkpoint.h"

namespace mb::gemma4 {

namespace {

std::mutex& filter_mutex() {
  static std::mutex m;
  return m;
}
WeightFilter& filter_slot() {
  static WeightFilter f;
  return f;
}

}  // namespace

void set_weight_filter(WeightFilter filter) {
  std::lock_guard<std::mutex> lk(filter_mutex());
  filter_slot() = std::move(filter);
}

WeightScope::WeightScope(WeightVisitor& visitor, std::string prefix, std::string component,
                         std::vector<std::string> alias_prefixes)
    : visitor_(&visitor), prefix_(std::move(prefix)), component_(std::move(component)),
      alias_prefixes_(std::move(alias_prefixes)) {}

WeightScope WeightScope::at(const std::string& more, int64_t layer) const {
  WeightScope s = *this;
  s.prefix_ += more;
  for (auto& a : s.alias_prefixes_) a += more;
  s.layer_ = layer;
  return s;
}

void WeightScope::emit(const std::string& name, Shape shape, WeightRole role, Hold hold, Tensor* t, float* s,
                       std::vector<std::string> aliases) const {
  WeightSpec spec;
  spec.name = prefix_ + name;
  spec.shape = std::move(shape);
  spec.component = component_;
  spec.layer = layer_;
  spec.role = role;
  for (const auto& a : alias_prefixes_) spec.aliases.push_back(a + name);
  for (auto& a : aliases) spec.aliases.push_back(std::move(a));
  {
    std::lock_guard<std::mutex> lk(filter_mutex());
    if (filter_slot() && !filter_slot()(spec)) return;
  }
  visitor_->weight(spec, hold, t, s);
}

void WeightScope::tensor(Tensor& slot, const std::string& name, Shape shape, std::vector<std::string> aliases) const {
  emit(name, std::move(shape), WeightRole::Required, Hold::InPlace, &slot, nullptr, std::move(aliases));
}
void WeightScope::f32(Tensor& slot, const std::string& name, Shape shape, std::vector<std::string> aliases) const {
  emit(name, std::move(shape), WeightRole::Required, Hold::F32, &slot, nullptr, std::move(aliases));
}
void WeightScope::scalar(float& slot, const std::string& name, Shape shape) const {
  emit(name, std::move(shape), WeightRole::Required, Hold::Scalar, nullptr, &slot, {});
}
void WeightScope::ignored(const std::string& name, Shape shape) const {
  emit(name, std::move(shape), WeightRole::Ignored, Hold::Ignored, nullptr, nullptr, {});
}

void visit_clippable(const WeightScope& s, ClippableLinear& l, const std::string& name, Shape shape, bool clipped) {
  s.tensor(l.weight, name + ".linear.weight", std::move(shape));
  if (!clipped) return;
  s.scalar(l.input_min, name + ".input_min");
  s.scalar(l.input_max, name + ".input_max");
  s.scalar(l.output_min, name + ".output_min");
  s.scalar(l.output_max, name + ".output_max");
}

void CheckpointBinder::weight(const WeightSpec& spec, Hold hold, Tensor* tensor_slot, float* scalar_slot) {
  if (hold == Hold::Ignored) return;
  const std::string* stored = nullptr;
  if (ckpt_.contains(spec.name)) stored = &spec.name;
  for (const auto& a : spec.aliases)
    if (!stored && ckpt_.contains(a)) stored = &a;
  if (!stored) throw CheckpointError(cat(ckpt_.dir(), ": tensor ", spec.name, " is missing"));
  Tensor t = ckpt_.tensor(*stored);
  // A [] scalar and a [1] vector hold the same one value; every other shape must match exactly.
  const bool one_value = hold == Hold::Scalar && t.numel() == 1;
  if (t.shape() != spec.shape && !one_value)
    throw CheckpointError(cat(ckpt_.dir(), ": tensor ", *stored, " has shape ", shape_str(t.shape()), ", expected ",
                              shape_str(spec.shape)));
  if (t.dtype() != DType::F32 && t.dtype() != DType::BF16 && t.dtype() != DType::F16)
    throw CheckpointError(cat(ckpt_.dir(), ": tensor ", *stored, " has dtype ", dtype_name(t.dtype()),
                              ", expected F32, BF16 or F16"));
  if (hold == Hold::Scalar) *scalar_slot = t.to(DType::F32).data_as<const float>()[0];
  else if (hold == Hold::F32) *tensor_slot = t.to(DType::F32);
  else *tensor_slot = t;
}

}  // namespace mb::gemma4
