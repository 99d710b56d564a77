// Named intermediates (as llama.cpp's `cb(cur, "attn_norm", il)`): model code names what it computes,
// and a trace observer installed on the calling thread sees each name with its tensor. Nothing is
// installed by default, so naming costs one thread-local load and a branch.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace mb::runtime {

class TraceObserver {
 public:
  virtual ~TraceObserver() = default;
  // `t` has just been computed (its ops are encoded; on a Metal device they may not have run yet).
  // layer −1: outside the layer stack (embeddings, final norm, logits).
  virtual void intermediate(const Tensor& t, const char* name, int64_t layer) = 0;
};

namespace detail {
extern thread_local TraceObserver* trace_observer;
}

// The observer for forwards run on this thread (nullptr: none); returns the previous one.
TraceObserver* set_trace_observer(TraceObserver* observer);

inline void name_intermediate(const Tensor& t, const char* name, int64_t layer) {
  if (TraceObserver* o = detail::trace_observer) o->intermediate(t, name, layer);
}

}  // namespace mb::runtime
