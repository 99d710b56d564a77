#include "ops/observer.h"

#include "ops/run_op.h"

namespace mb::ops {

namespace detail {
std::atomic<OpObserver*> op_observer{nullptr};
}

OpObserver* set_op_observer(OpObserver* o) { return detail::op_observer.exchange(o, std::memory_order_acq_rel); }

std::span<const Tensor> Operands::view(std::vector<Tensor>& storage) const {
  if (n_ == 0) return list_;
  storage.reserve(n_);
  for (size_t i = 0; i < n_; ++i) storage.push_back(ptrs_[i] ? *ptrs_[i] : Tensor());
  return storage;
}

void notify_op(OpObserver& o, const char* op, const Backend& backend, const Operands& in, const Operands& out) {
  std::vector<Tensor> ins, outs;
  o.after_op(op, backend, in.view(ins), out.view(outs));
}

}  // namespace mb::ops
