// First-non-finite tracing: while a NonFiniteTracer is installed, every op of the traced backend is
// synchronized and its outputs checked for NaN / Inf. The first op that produces one is reported with the
// statistics of its inputs, named by the first named intermediate (runtime/trace.h) the bad value reaches
// ("layer 17, attn_out (op attention, backend metal-sim)"), and the forward stops there with a
// NumericsError. Used by trace_nonfinite (`model.trace_nonfinite`, `markbase trace`) and, with
// MARKBASE_CHECK_FINITE=1, by every forward.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "ops/observer.h"
#include "runtime/trace.h"

namespace mb::runtime {

struct NonFiniteReport {
  bool found = false;
  int64_t layer = -1;          // −1: outside the layer stack
  std::string intermediate;    // the named intermediate the first non-finite value reached
  std::string op, backend;     // the op that produced it, and where it ran
  std::vector<std::string> inputs;  // one line per input of that op: shape, dtype, weight name, NaN/Inf, range
  std::string output;               // the same for its output
  // "layer 3, ffn_mlp (op linear, backend cpu)"
  std::string where() const;
  // where() and the operand lines, for messages.
  std::string describe() const;
};

// Statistics of a tensor for a report line: "f32[1, 64]: 2 NaN, 0 Inf of 64; finite range [-1.5, 2.25]".
std::string tensor_stats(const Tensor& t);

class NonFiniteTracer final : public ops::OpObserver, public TraceObserver {
 public:
  // Traces the ops run on `backend` by the calling thread; weight_name names a weight tensor by its
  // memory ("" for activations).
  NonFiniteTracer(const Backend& backend, std::function<std::string(const Tensor&)> weight_name);
  ~NonFiniteTracer() override;  // uninstalls
  NonFiniteTracer(const NonFiniteTracer&) = delete;
  NonFiniteTracer& operator=(const NonFiniteTracer&) = delete;

  const NonFiniteReport& report() const { return report_; }
  // After the forward: a non-finite value that no named intermediate followed is reported as found in
  // the last layer seen.
  void finish();

  void after_op(const char* op, const Backend& backend, std::span<const Tensor> inputs,
                std::span<const Tensor> outputs) override;
  void intermediate(const Tensor& t, const char* name, int64_t layer) override;

 private:
  const Backend& backend_;
  std::function<std::string(const Tensor&)> weight_name_;
  std::thread::id thread_;
  bool pending_ = false;  // an op produced a non-finite value; the next named intermediate names it
  int64_t last_layer_ = -1;
  NonFiniteReport report_;
  ops::OpObserver* prev_op_ = nullptr;
  TraceObserver* prev_trace_ = nullptr;
};

}  // namespace mb::runtime
