#include "runtime/nonfinite.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "core/errors.h"

namespace mb::runtime {

namespace {

template <class T>
void scan(const T* p, int64_t n, int64_t& nan, int64_t& inf, double& lo, double& hi) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = load_f32(p + i);
    if (std::isnan(v)) ++nan;
    else if (std::isinf(v)) ++inf;
    else {
      lo = std::min(lo, double(v));
      hi = std::max(hi, double(v));
    }
  }
}

// NaN and Inf counts of a float tensor (any strides).
bool has_nonfinite(const Tensor& t) {
  if (!t.defined() || !dtype_is_float(t.dtype()) || t.numel() == 0) return false;
  const Tensor c = t.contiguous();
  int64_t nan = 0, inf = 0;
  double lo = 0, hi = 0;
  if (c.dtype() == DType::F32) scan(c.data_as<const float>(), c.numel(), nan, inf, lo, hi);
  else if (c.dtype() == DType::BF16) scan(c.data_as<const bf16_t>(), c.numel(), nan, inf, lo, hi);
  else scan(c.data_as<const f16_t>(), c.numel(), nan, inf, lo, hi);
  return nan + inf > 0;
}

}  // namespace

std::string tensor_stats(const Tensor& t) {
  if (!t.defined()) return "(absent)";
  std::ostringstream os;
  os << t.describe();
  if (t.numel() == 0) return os.str();
  const Tensor c = t.contiguous();
  const int64_t n = c.numel();
  if (dtype_is_float(c.dtype())) {
    int64_t nan = 0, inf = 0;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    if (c.dtype() == DType::F32) scan(c.data_as<const float>(), n, nan, inf, lo, hi);
    else if (c.dtype() == DType::BF16) scan(c.data_as<const bf16_t>(), n, nan, inf, lo, hi);
    else scan(c.data_as<const f16_t>(), n, nan, inf, lo, hi);
    os << ": " << nan << " NaN, " << inf << " Inf of " << n;
    if (nan + inf < n) os << "; finite range [" << lo << ", " << hi << "]";
  } else if (c.dtype() == DType::I32 || c.dtype() == DType::I64) {
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = c.dtype() == DType::I32 ? c.data_as<const int32_t>()[i] : c.data_as<const int64_t>()[i];
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    os << ": range [" << lo << ", " << hi << "]";
  }
  return os.str();
}

std::string NonFiniteReport::where() const {
  if (!found) return "no NaN or Inf";
  std::string w = layer >= 0 ? cat("layer ", layer, ", ") : std::string();
  return cat(w, intermediate, " (op ", op, ", backend ", backend, ")");
}

std::string NonFiniteReport::describe() const {
  if (!found) return where();
  std::string out = cat("first non-finite value: ", where());
  for (size_t i = 0; i < inputs.size(); ++i) out += cat("\n  input ", i, ": ", inputs[i]);
  out += cat("\n  output: ", output);
  return out;
}

NonFiniteTracer::NonFiniteTracer(const Backend& backend, std::function<std::string(const Tensor&)> weight_name)
    : backend_(backend), weight_name_(std::move(weight_name)), thread_(std::this_thread::get_id()) {
  prev_op_ = ops::set_op_observer(this);
  prev_trace_ = set_trace_observer(this);
}

NonFiniteTracer::~NonFiniteTracer() {
  ops::set_op_observer(prev_op_);
  set_trace_observer(prev_trace_);
}

void NonFiniteTracer::after_op(const char* op, const Backend& backend, std::span<const Tensor> inputs,
                               std::span<const Tensor> outputs) {
  if (pending_ || report_.found || &backend != &backend_ || std::this_thread::get_id() != thread_) return;
  if (backend.deferred()) backend.synchronize();  // the outputs exist only now
  bool bad = false;
  for (const Tensor& t : outputs) bad = bad || has_nonfinite(t);
  if (!bad) return;
  pending_ = true;
  report_.op = op;
  report_.backend = backend.name();
  for (const Tensor& t : inputs) {
    const std::string name = t.defined() && weight_name_ ? weight_name_(t) : std::string();
    report_.inputs.push_back(name.empty() ? tensor_stats(t) : cat(name, " ", tensor_stats(t)));
  }
  for (const Tensor& t : outputs) report_.output += (report_.output.empty() ? "" : "; ") + tensor_stats(t);
}

void NonFiniteTracer::finish() {
  if (!pending_ || report_.found) return;
  report_.found = true;
  report_.layer = last_layer_;
  report_.intermediate = "(after the last named intermediate)";
}

void NonFiniteTracer::intermediate(const Tensor& t, const char* name, int64_t layer) {
  if (std::this_thread::get_id() != thread_) return;
  if (!pending_) last_layer_ = layer;
  if (!pending_ || report_.found) return;
  report_.found = true;
  report_.layer = layer;
  report_.intermediate = name;
  throw NumericsError(report_.describe());
}

}  // namespace mb::runtime
