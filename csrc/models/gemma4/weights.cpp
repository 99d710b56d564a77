#include "models/gemma4/weights.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "core/errors.h"
#include "core/host_memory.h"
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

void WeightScope::emit(const std::string& name, Shape shape, WeightRole role, Hold hold, WeightSlot slot,
                       std::vector<std::string> aliases, QuantRule rule,
                       const std::pair<std::string, std::string>& halves) const {
  WeightSpec spec;
  spec.name = prefix_ + name;
  spec.shape = std::move(shape);
  spec.component = component_;
  spec.layer = layer_;
  spec.role = role;
  for (const auto& a : alias_prefixes_) spec.aliases.push_back(a + name);
  for (auto& a : aliases) spec.aliases.push_back(std::move(a));
  if (!halves.first.empty()) {
    spec.split_halves.emplace_back(prefix_ + halves.first, prefix_ + halves.second);
    for (const auto& a : alias_prefixes_) spec.split_halves.emplace_back(a + halves.first, a + halves.second);
  }
  spec.linear = hold == Hold::Linear;
  spec.quant = rule;
  {
    std::lock_guard<std::mutex> lk(filter_mutex());
    if (filter_slot() && !filter_slot()(spec)) return;
  }
  visitor_->weight(spec, hold, slot);
}

void WeightScope::tensor(Tensor& slot, const std::string& name, Shape shape, std::vector<std::string> aliases) const {
  emit(name, std::move(shape), WeightRole::Required, Hold::InPlace, {&slot, nullptr, nullptr}, std::move(aliases));
}
void WeightScope::f32(Tensor& slot, const std::string& name, Shape shape, std::vector<std::string> aliases) const {
  emit(name, std::move(shape), WeightRole::Required, Hold::F32, {&slot, nullptr, nullptr}, std::move(aliases));
}
void WeightScope::scalar(float& slot, const std::string& name, Shape shape) const {
  emit(name, std::move(shape), WeightRole::Required, Hold::Scalar, {nullptr, &slot, nullptr}, {});
}
void WeightScope::linear(ops::LinearWeight& slot, const std::string& name, Shape shape, QuantRule rule,
                         std::vector<std::string> aliases, std::pair<std::string, std::string> halves,
                         ops::LinearWeight* second_half) const {
  std::vector<std::string> spelled;  // each relative alias under the scope's prefix and its alias prefixes
  for (const auto& a : aliases) {
    spelled.push_back(prefix_ + a);
    for (const auto& p : alias_prefixes_) spelled.push_back(p + a);
  }
  emit(name, std::move(shape), WeightRole::Required, Hold::Linear, {nullptr, nullptr, &slot, second_half},
       std::move(spelled), rule, halves);
}
void WeightScope::ignored(const std::string& name, Shape shape) const {
  emit(name, std::move(shape), WeightRole::Ignored, Hold::Ignored, {}, {});
}

void visit_clippable(const WeightScope& s, ClippableLinear& l, const std::string& name, Shape shape, bool clipped) {
  s.tensor(l.weight, name + ".linear.weight", std::move(shape));
  if (!clipped) return;
  s.scalar(l.input_min, name + ".input_min");
  s.scalar(l.input_max, name + ".input_max");
  s.scalar(l.output_min, name + ".output_min");
  s.scalar(l.output_max, name + ".output_max");
}

namespace {

// "<base>.weight" -> "<base>"; names without the suffix (stacked experts) are their own base.
std::string quant_base(const std::string& name) {
  const std::string suffix = ".weight";
  if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return name.substr(0, name.size() - suffix.size());
  return name;
}

}  // namespace

bool find_quantized(const io::Checkpoint& ckpt, const std::string& name, const Shape& shape, ops::QuantizedMatrix* out,
                    bool gathered_only) {
  const std::string base = quant_base(name);
  const std::string sn = base + ".scales", bn = base + ".biases";
  if (!ckpt.contains(sn) || !ckpt.contains(name)) return false;
  const std::string& dir = ckpt.dir();
  if (!ckpt.contains(bn))
    throw CheckpointError(cat(dir, ": ", sn, " is present but ", bn, " is missing (markbase reads MLX's affine "
                              "quantization: scales and biases per group)"));
  Tensor q = ckpt.packed_bytes(name), scales = ckpt.tensor(sn), biases = ckpt.tensor(bn);
  const int64_t K = shape.back();
  const Shape lead(shape.begin(), shape.end() - 1);  // [.., N]
  auto lead_of = [](const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 1); };
  if (lead_of(q) != lead || lead_of(scales) != lead || scales.shape() != biases.shape() || scales.size(-1) < 1)
    throw CheckpointError(cat(dir, ": quantized ", name, " (", shape_str(ckpt.info(name).shape), " ", ckpt.info(name).dtype,
                              ", scales ", shape_str(scales.shape()), ", biases ", shape_str(biases.shape()),
                              ") does not hold a matrix of shape ", shape_str(shape)));
  const int64_t bytes = q.size(-1), groups = scales.size(-1);
  const int bits = int(bytes * 8 / K);
  const int group_size = int(K / groups);
  if (bytes * 8 % K || K % groups || bits < 1 || bits > 8 || bits == 7 ||
      (group_size != 32 && group_size != 64 && group_size != 128))
    throw CheckpointError(cat(dir, ": quantized ", name, " holds ", K, " columns in ", bytes, " bytes per row with ", groups,
                              " groups: markbase reads MLX's affine weights of 1-6 or 8 bits in groups of 32, 64 or 128 "
                              "(other MLX modes and widths are not supported)"));
  for (const Tensor* t : {&scales, &biases})
    if (t->dtype() != DType::F32 && t->dtype() != DType::BF16 && t->dtype() != DType::F16)
      throw CheckpointError(cat(dir, ": ", t == &scales ? sn : bn, " has dtype ", dtype_name(t->dtype()),
                                ", expected F32, BF16 or F16"));
  if (bits != 4 && bits != 8 && !gathered_only) {  // (after every check: a refused matrix costs no pass)
    // MLX's other widths, held exactly at the kernels' width (5 / 6 bits as bytes, 1-3 as nibbles): owned
    // memory, so the mapped pages of the packed source are let go.
    q = ops::widen_affine_bits(q, K, bits);
    ckpt.release(name);
  }
  out->q = q;
  out->scales = scales;
  out->biases = biases;
  out->bits = gathered_only ? bits : ops::held_affine_bits(bits);
  out->group_size = group_size;
  return true;
}

namespace {

// Quantizes a dense [N, K] or stacked [E, N, K] matrix (rows quantized independently).
ops::QuantizedMatrix quantize_stacked(const Tensor& w, int bits, int group_size) {
  const int64_t K = w.size(-1), rows = w.numel() / K;
  const DType sdt = w.dtype();  // MLX keeps scales and biases in the weight's dtype
  ops::QuantizedMatrix m = ops::quantize_affine(w.reshape({rows, K}), bits, group_size, sdt);
  Shape qs = w.shape(), gs = w.shape();
  qs.back() = K * bits / 8;
  gs.back() = K / group_size;
  m.q = m.q.reshape(qs);
  m.scales = m.scales.reshape(gs);
  m.biases = m.biases.reshape(gs);
  return m;
}

// Dequantizes a (possibly stacked) matrix to dtype `dt`, for slots that are not LinearWeights.
Tensor dequantize_stacked(const ops::QuantizedMatrix& m, const Shape& shape, DType dt) {
  const int64_t K = shape.back(), rows = m.q.numel() * 8 / m.bits / K;
  ops::QuantizedMatrix flat = m;
  flat.q = m.q.reshape({rows, m.q.size(-1)});
  flat.scales = m.scales.reshape({rows, m.scales.size(-1)});
  flat.biases = m.biases.reshape({rows, m.biases.size(-1)});
  return ops::dequantize_affine(flat).reshape(shape).to(dt);
}

}  // namespace

namespace {

// A tensor MLX stores in its own layout, back in transformers' (stored under an MLX name only): audio
// conv kernels channels-last [O, kH, kW, I] -> [O, I, kH, kW]; depthwise [C, K, 1] -> [C, 1, K] (same bytes).
bool from_mlx_layout(const Tensor& t, const Shape& want, Tensor* out) {
  const Shape& got = t.shape();
  if (want.size() == 4 && got == Shape{want[0], want[2], want[3], want[1]}) {
    *out = t.permute({0, 3, 1, 2}).contiguous();
    return true;
  }
  if (want.size() == 3 && want[1] == 1 && got == Shape{want[0], want[2], 1}) {
    *out = t.reshape(want);
    return true;
  }
  return false;
}

}  // namespace

Tensor WeightSlab::copy(const Tensor& t) {
  const size_t bytes = t.nbytes(), padded = (bytes + 63) / 64 * 64;
  if (padded > capacity_ - used_) {
    capacity_ = std::max(kBlockBytes, padded);
    block_ = host_alloc(capacity_);
    if (!block_) throw MarkbaseError(cat("out of memory copying ", t.describe(), " out of the checkpoint mapping"));
    used_ = 0;
  }
  uint8_t* p = static_cast<uint8_t*>(block_.get()) + used_;
  used_ += padded;
  std::memcpy(p, t.data(), bytes);
  return Tensor::wrap_contiguous(p, t.dtype(), t.shape(), block_, StorageKind::Owned);
}

void CheckpointBinder::weight(const WeightSpec& spec, Hold hold, WeightSlot slot) {
  if (hold == Hold::Ignored) return;
  const std::string* stored = nullptr;
  if (ckpt_.contains(spec.name)) stored = &spec.name;
  for (const auto& a : spec.aliases)
    if (!stored && ckpt_.contains(a)) stored = &a;
  if (!stored) {
    for (const auto& [first, second] : spec.split_halves)
      if (ckpt_.contains(first) && ckpt_.contains(second)) return bind_halves(spec, hold, slot, first, second);
    throw CheckpointError(cat(ckpt_.dir(), ": tensor ", spec.name, " is missing"));
  }
  ops::QuantizedMatrix stored_quant;
  if (spec.shape.size() >= 2 &&
      find_quantized(ckpt_, *stored, spec.shape, &stored_quant, hold == Hold::Linear && spec.quant == QuantRule::Gathered)) {
    if (hold == Hold::Linear) slot.linear->quant = stored_quant;
    else if (hold == Hold::F32) *slot.tensor = dequantize_stacked(stored_quant, spec.shape, DType::F32);
    else *slot.tensor = dequantize_stacked(stored_quant, spec.shape, stored_quant.scales.dtype());
    return;
  }
  Tensor t = ckpt_.tensor(*stored);
  // A [] scalar and a [1] vector hold the same one value; every other shape must match exactly.
  const bool one_value = hold == Hold::Scalar && t.numel() == 1;
  const bool mlx_name = stored != &spec.name && stored->rfind("model.", 0) != 0;
  if (t.shape() != spec.shape && mlx_name && (hold == Hold::InPlace || hold == Hold::F32)) from_mlx_layout(t, spec.shape, &t);
  if (t.shape() != spec.shape && !one_value)
    throw CheckpointError(cat(ckpt_.dir(), ": tensor ", *stored, " has shape ", shape_str(t.shape()), ", expected ",
                              shape_str(spec.shape)));
  if (t.dtype() != DType::F32 && t.dtype() != DType::BF16 && t.dtype() != DType::F16)
    throw CheckpointError(cat(ckpt_.dir(), ": tensor ", *stored, " has dtype ", dtype_name(t.dtype()),
                              ", expected F32, BF16 or F16"));
  if (hold == Hold::Scalar) *slot.scalar = t.to(DType::F32).data_as<const float>()[0];
  else if (hold == Hold::F32) *slot.tensor = t.to(DType::F32);
  else if (hold == Hold::InPlace) *slot.tensor = t;
  else {
    const int bits = spec.quant == QuantRule::Matrix ? quantize_.bits
                     : spec.quant == QuantRule::Table && quantize_.bits ? quantize_.table_bits  // 8: near-exact
                                                                         : 0;
    if (bits && spec.shape.back() % quantize_.group_size == 0) {
      slot.linear->quant = quantize_stacked(t, bits, quantize_.group_size);
      ckpt_.release(*stored);  // the bf16 source pages leave this process as soon as they are quantized
    } else if (quantize_.bits && spec.component == "text" && spec.quant != QuantRule::Gathered) {
      slot.linear->dense = slab_.copy(t);  // streamed every decode step: on 2 MiB pages (WeightSlab)
      ckpt_.release(*stored);
    } else {
      slot.linear->dense = t;
    }
  }
}

void CheckpointBinder::bind_halves(const WeightSpec& spec, Hold hold, WeightSlot slot, const std::string& first,
                                   const std::string& second) {
  if (hold != Hold::Linear || !slot.second_half)
    throw CheckpointError(cat(ckpt_.dir(), ": ", spec.name, " is stored as two halves (", first, ", ", second,
                              ") but is not held as two matrices"));  // a visit-function bug, not the file's
  Shape half = spec.shape;
  half[half.size() - 2] /= 2;
  ops::QuantizedMatrix qa, qb;
  const bool qa_found = find_quantized(ckpt_, first, half, &qa), qb_found = find_quantized(ckpt_, second, half, &qb);
  if (qa_found != qb_found)
    throw CheckpointError(cat(ckpt_.dir(), ": ", first, " and ", second, " (the two halves of ", spec.name,
                              ") are stored in different formats"));
  // The decoder runs the halves apart: each binds in place.
  bind_half(first, half, spec.quant, qa_found ? &qa : nullptr, *slot.linear);
  bind_half(second, half, spec.quant, qb_found ? &qb : nullptr, *slot.second_half);
}

void CheckpointBinder::bind_half(const std::string& name, const Shape& shape, QuantRule rule,
                                 const ops::QuantizedMatrix* stored_quant, ops::LinearWeight& slot) {
  if (stored_quant) {
    slot.quant = *stored_quant;
    return;
  }
  Tensor t = ckpt_.tensor(name);
  if (t.shape() != shape || (t.dtype() != DType::F32 && t.dtype() != DType::BF16 && t.dtype() != DType::F16))
    throw CheckpointError(cat(ckpt_.dir(), ": tensor ", name, " is ", t.describe(), ", expected a float ", shape_str(shape)));
  const int bits = rule == QuantRule::Matrix ? quantize_.bits : 0;
  if (bits && shape.back() % quantize_.group_size == 0) {
    slot.quant = quantize_stacked(t, bits, quantize_.group_size);
    ckpt_.release(name);
  } else {
    slot.dense = t;
  }
}

}  // namespace mb::gemma4
