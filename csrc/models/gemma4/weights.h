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
#include "ops/quant.h"

namespace mb::io {
class Checkpoint;
}

namespace mb::gemma4 {

enum class WeightRole : uint8_t {
  Required,  // must be present with this shape
  Ignored,   // may be present (KV-reuse layers' k/v projections, an untied lm_head) and is never read
};

// What load-time quantization (`load(..., quantize=q8|q4)`) may do to a matrix held as a LinearWeight.
enum class QuantRule : uint8_t {
  Keep,    // stays as stored: numerically sensitive (router, PLE projections; spec §2.3, issue 12)
  Matrix,  // quantized to the requested bits (attention / MLP / expert projections)
  Table,   // a gathered table that is also a matmul (the tied embedding / LM head): at most 8 bits
  Gathered,  // only ever gathered (the PLE table): stays as stored, an MLX-quantized one at its stored width
};

struct WeightSpec {
  std::string name;
  Shape shape;
  std::string component;  // "text", "vision", "audio", "embed_vision", "embed_audio"
  int64_t layer = -1;     // decoder / encoder layer, −1 for global tensors
  WeightRole role = WeightRole::Required;
  std::vector<std::string> aliases;
  // MLX stores some matrices as two halves concatenated along dim −2 here (the experts' gate and up
  // projections): pairs of stored names, one pair per spelling (the name's prefix and each alias's).
  std::vector<std::pair<std::string, std::string>> split_halves;
  bool linear = false;              // held as an ops::LinearWeight: may be stored MLX-quantized on disk
  QuantRule quant = QuantRule::Keep;
  bool required() const { return role == WeightRole::Required; }
};

// How the model holds a tensor.
enum class Hold : uint8_t {
  InPlace,  // read in place from the mapped checkpoint (matrices, tables), any float dtype
  F32,      // converted to f32 once at load (norm weights, small scales)
  Scalar,   // one value read into a float (layer_scalar, clip bounds)
  Linear,   // an ops::LinearWeight: in place, quantized at load, or MLX-quantized on disk
  Ignored,  // never read
};

// Where the model keeps one tensor: exactly one member is set (none for Hold::Ignored).
struct WeightSlot {
  Tensor* tensor = nullptr;             // InPlace / F32
  float* scalar = nullptr;              // Scalar
  ops::LinearWeight* linear = nullptr;  // Linear
  // A Linear that may be stored as two halves (WeightSpec::split_halves): `linear` then takes the first
  // half and this the second, both in place (the model runs them apart).
  ops::LinearWeight* second_half = nullptr;
};

// Receives every tensor a visit function names, with where the model keeps it.
class WeightVisitor {
 public:
  virtual ~WeightVisitor() = default;
  virtual void weight(const WeightSpec& spec, Hold hold, WeightSlot slot) = 0;
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
  // A matrix [N, K] (or stacked experts [E, N, K]) that ops::linear / ops::embedding read.
  // aliases: other names relative to this scope (MLX's); halves: see WeightSpec::split_halves, bound to
  // `slot` and `second_half` when the checkpoint stores them.
  void linear(ops::LinearWeight& slot, const std::string& name, Shape shape, QuantRule rule,
              std::vector<std::string> aliases = {}, std::pair<std::string, std::string> halves = {},
              ops::LinearWeight* second_half = nullptr) const;
  void ignored(const std::string& name, Shape shape) const;

 private:
  void emit(const std::string& name, Shape shape, WeightRole role, Hold hold, WeightSlot slot,
            std::vector<std::string> aliases, QuantRule rule = QuantRule::Keep,
            const std::pair<std::string, std::string>& halves = {}) const;

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

// Load-time quantization: bits 0 keeps every matrix as stored; 4 or 8 quantizes QuantRule::Matrix slots
// to `bits` and QuantRule::Table slots to `table_bits` (8 by default, or 4), in MLX's affine format with
// groups of `group_size`.
struct QuantizeOptions {
  int bits = 0;
  int group_size = 64;
  int table_bits = 8;
};

// The dense matrices a quantizing load keeps (PLE projections, the router; QuantRule::Keep), copied out of
// the mapping into blocks of 2 MiB pages (host_alloc). A decode step streams them beside the quantized
// weights, and through a mapping they come on 4 KiB pages wherever the page cache holds the file in small
// folios: E2B's 82 MB of them then ran at ~7 GB/s (10.8 ms of an 89 ms 4-bit step), 14-19 GB/s on 2 MiB pages.
class WeightSlab {
 public:
  Tensor copy(const Tensor& t);  // t's values (contiguous) in the slab

 private:
  static constexpr size_t kBlockBytes = size_t(32) << 20;
  std::shared_ptr<void> block_;
  size_t used_ = 0, capacity_ = 0;
};

// Binds a walk's slots from the checkpoint: a required tensor that is missing, misshapen or not a float
// dtype is a CheckpointError naming it (load validates first, so this is the last line of defence).
// A matrix stored MLX-quantized (`<name>` u32-packed beside `<base>.scales` / `<base>.biases`) binds in
// place to a Linear slot, and is dequantized (to the scales' dtype) for any other slot. Matrices
// quantized here release their source pages as they go, so peak memory stays near the quantized size.
class CheckpointBinder : public WeightVisitor {
 public:
  explicit CheckpointBinder(const io::Checkpoint& ckpt, QuantizeOptions quantize = {})
      : ckpt_(ckpt), quantize_(quantize) {}
  void weight(const WeightSpec& spec, Hold hold, WeightSlot slot) override;

 private:
  // spec stored as two halves along dim −2 (WeightSpec::split_halves): bound to the slot's two matrices.
  void bind_halves(const WeightSpec& spec, Hold hold, WeightSlot slot, const std::string& first, const std::string& second);
  // One half bound in place (stored quantized, quantized here, or dense).
  void bind_half(const std::string& name, const Shape& shape, QuantRule rule, const ops::QuantizedMatrix* stored_quant,
                 ops::LinearWeight& slot);

  const io::Checkpoint& ckpt_;
  QuantizeOptions quantize_;
  WeightSlab slab_;  // the text decoder's dense matrices under a quantizing load
};

// The MLX-quantized form of matrix `name` [.., N, K] in ckpt, if stored so: `name` (or the name it is
// stored under) as packed U32 [.., N, K·bits/32] plus `<base>.scales` / `<base>.biases` [.., N, K/group]
// where base is `name` without ".weight". Bits and group size follow from the shapes. Returns false when
// the matrix is stored unquantized; a quantized form that contradicts `shape` is a CheckpointError.
// MLX's 1-3 / 5-6 bit widths are widened to the linear kernels' 4 / 8 unless `gathered_only` (a table the
// model only gathers from keeps its stored width, mapped in place).
bool find_quantized(const io::Checkpoint& ckpt, const std::string& name, const Shape& shape, ops::QuantizedMatrix* out,
                    bool gathered_only = false);

// Test seam (tests/models/test_weight_table.py): entries the filter rejects are dropped from every walk,
// as if deleted from the visit functions. Null (the default) keeps everything.
using WeightFilter = std::function<bool(const WeightSpec&)>;
void set_weight_filter(WeightFilter filter);

}  // namespace mb::gemma4
