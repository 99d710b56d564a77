// The op observer: one global hook told after every op (a NaN tracer, an op log). Null by default, so an
// op pays one branch for it.
#pragma once
#include <atomic>
#include <span>

#include "core/tensor.h"

namespace mb {
class Backend;
}

namespace mb::ops {

class OpObserver {
 public:
  virtual ~OpObserver() = default;
  // Called after op `op` ("linear", "gelu_tanh", "add", ...; the front door's name) ran on `backend`
  // (the CPU reference backend for a reference run). inputs / outputs: the op's tensors in the order of
  // its signature, an undefined Tensor for an absent optional one; an output updated in place (index_add's
  // out, an in-place rope) is listed as an output. On a deferred backend (backend.deferred()) the outputs
  // are only encoded: read them after backend.synchronize(). Called on the thread that ran the op, so
  // possibly on several threads at once.
  virtual void after_op(const char* op, const Backend& backend, std::span<const Tensor> inputs,
                        std::span<const Tensor> outputs) = 0;
};

// Installs `o` for every op on every thread (nullptr: none); returns the one it replaces. The caller
// keeps `o` alive while it is installed, and swaps observers only while no op runs.
OpObserver* set_op_observer(OpObserver* o);

namespace detail {
extern std::atomic<OpObserver*> op_observer;
}

inline OpObserver* op_observer() { return detail::op_observer.load(std::memory_order_acquire); }

}  // namespace mb::ops
