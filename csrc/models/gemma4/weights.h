// The Gemma 4 weight table: every tensor a checkpoint of a given config holds, with its shape, spelled
// exactly once. Each part of the model (text.h, vision.h, audio.h, unified_embedders.h) has a
// `visit_weights` function that walks its weight struct and names every slot in it through a WeightScope;
// the same walk
//   - builds the table (weight_table(cfg): what `validate` checks a checkpoint against), and
//   - binds the slots from a checkpoint when the model loads (bind_weights).
// So a tensor deleted from a visit function is no longer expected by `validate` nor read by `load`.
// Names are transformers' module names (what save_pretrained writes); aliases are other on-disk spellings
// of the same tensor (the legacy doubled `model.language_model.model.` prefix, the 12B's
// `model.vision_embedder.*`).
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/gemma4/config.h"

namespace mb::io {
class Checkpoint;
}

namespace mb::gemma4 {

enum class WeightRole : uint8_t {
  Required,  // must be present with this shape
  Ignored,   // may be present (KV-reuse layers' k/v projections, an untied lm_head) and is never read
};

struct WeightSpec {
  std::string name;
  Shape shape;
  std::string component;  // "text", "vision", "audio", "embed_vision", "embed_audio"
  int64_t layer = -1;     // decoder / encoder layer, −1 for global tensors
  WeightRole role = WeightRole::Required;
  std::vector<std::string> aliases;
  bool required() const { return role == WeightRole::Required; }
};

// How the model holds a tensor.
enum class Hold : uint8_t {
  InPlace,  // read in place from the mapped checkpoint (matrices, tables), any float dtype
  F32,      // converted to f32 once at load (norm weights, small scales)
  Scalar,   // one value read into a float (layer_scalar, clip bounds)
  Ignored,  // never read
};

// Receives every tensor a visit function names, with where the model keeps it.
class WeightVisitor {
 public:
  virtual ~WeightVisitor() = default;
  // tensor_slot is set for InPlace / F32, scalar_slot for Scalar, neither for Ignored.
  virtual void weight(const WeightSpec& spec, Hold hold, Tensor* tensor_slot, float* scalar_slot) = 0;
};

// Names tensors relative to a prefix, for one component and layer.
class WeightScope {
 public:
  WeightScope(WeightVisitor& visitor, std::string prefix, std::string component, std::vector<std::string> alias_prefixes = {});
  // The scope of layer `layer` under `more` ("layers.3.").
  WeightScope at(const std::string& more, int64_t layer) const;

  void tensor(Tensor& slot, const std::string& name, Shape shape, std::vector<std::string> aliases = {}) const;
  void f32(Tensor& slot, const std::string& name, Shape shape, std::vector<std::string> aliases = {}) const;
  void scalar(float& slot, const std::string& name, Shape shape = {}) const;
  void ignored(const std::string& name, Shape shape) const;

 private:
  void emit(const std::string& name, Shape shape, WeightRole role, Hold hold, Tensor* t, float* s,
            std::vector<std::string> aliases) const;

  WeightVisitor* visitor_;
  std::string prefix_;
  std::string component_;
  std::vector<std::string> alias_prefixes_;
  int64_t layer_ = -1;
};

// A linear layer that may clamp its input and output (vision and audio towers, spec §3.4):
// y = clamp(clamp(x, input_min, input_max) · Wᵀ, output_min, output_max); the bounds come from the
// checkpoint when the config says the linears are clipped, else they stay ±inf.
struct ClippableLinear {
  Tensor weight;  // [out, in], `<name>.linear.weight`
  float input_min = -std::numeric_limits<float>::infinity(), input_max = std::numeric_limits<float>::infinity();
  float output_min = -std::numeric_limits<float>::infinity(), output_max = std::numeric_limits<float>::infinity();
};
// Names `<name>.linear.weight` and, when clipped, the four `<name>.{input,output}_{min,max}` scalars.
void visit_clippable(const WeightScope& s, ClippableLinear& l, const std::string& name, Shape shape, bool clipped);

// Binds a walk's slots from the checkpoint: a required tensor that is missing, misshapen or not a float
// dtype is a CheckpointError naming it (load validates first, so this is the last line of defence).
class CheckpointBinder : public WeightVisitor {
 public:
  explicit CheckpointBinder(const io::Checkpoint& ckpt) : ckpt_(ckpt) {}
  void weight(const WeightSpec& spec, Hold hold, Tensor* tensor_slot, float* scalar_slot) override;

 private:
  const io::Checkpoint& ckpt_;
};

// Test seam (tests/models/test_weight_table.py): entries the filter rejects are dropped from every walk,
// as if deleted from the visit functions. Null (the default) keeps everything.
using WeightFilter = std::function<bool(const WeightSpec&)>;
void set_weight_filter(WeightFilter filter);

}  // namespace mb::gemma4
