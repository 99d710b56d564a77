#include "models/gemma4/encoder_ops.h"

#include <cmath>

#include "core/mutation.h"
#include "ops/elementwise.h"
#include "ops/linear.h"

namespace mb::gemma4 {

void clippable_linear(const Exec& ex, const ClippableLinear& l, Tensor& scratch, const Tensor& x, Tensor& out) {
  const bool clip_in = (std::isfinite(l.input_min) || std::isfinite(l.input_max)) && !mutation("clip_input_removed");
  if (clip_in) ops::unary(x, scratch, {ops::UnaryKind::Clamp, l.input_min, l.input_max}, ex);
  ops::linear(clip_in ? scratch : x, l.weight, nullptr, out, ex);
  if ((std::isfinite(l.output_min) || std::isfinite(l.output_max)) && !mutation("clip_output_removed"))
    ops::unary(out, out, {ops::UnaryKind::Clamp, l.output_min, l.output_max}, ex);
}

ClippableLinear output_rows(const ClippableLinear& l, int64_t begin, int64_t end) {
  ClippableLinear part = l;
  part.weight = l.weight.slice(0, begin, end);
  return part;
}

}  // namespace mb::gemma4
