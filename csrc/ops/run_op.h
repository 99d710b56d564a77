// The tail every op front door ends in, after validating its arguments:
//   run_op(c.op, ex, {&x, &w, bias}, {&out}, [&](const Backend& b) { b.linear(x, w, bias, out, ex.bf16_products); });
// picks the backend (the CPU reference kernels for a reference run, else ex.backend), runs the op's
// entry point on it, and tells the op observer (ops/observer.h), if one is installed.
#pragma once
#include <array>
#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

#include "backend/registry.h"
#include "core/tensor.h"
#include "ops/exec.h"
#include "ops/observer.h"

namespace mb::ops {

// An op's input or output tensors for the observer: pointers (nullptr for an absent optional tensor)
// or a list (concat's inputs). Building one copies a few pointers; Tensors are copied only for an observer.
class Operands {
 public:
  static constexpr size_t kMax = 8;
  template <class... P>
    requires(std::is_convertible_v<P, const Tensor*> && ...)
  Operands(P... ptrs) : ptrs_{ptrs...}, n_(sizeof...(P)) {
    static_assert(sizeof...(P) >= 1 && sizeof...(P) <= kMax, "an op lists 1 to kMax operands");
  }
  Operands(const std::vector<Tensor>& tensors) : list_(tensors) {}
  // The tensors (an undefined Tensor for each nullptr), copied into `storage` when given as pointers.
  std::span<const Tensor> view(std::vector<Tensor>& storage) const;

 private:
  std::array<const Tensor*, kMax> ptrs_{};
  size_t n_ = 0;
  std::span<const Tensor> list_;
};

// Tells `o` about one op (out of line: only reached when an observer is installed).
void notify_op(OpObserver& o, const char* op, const Backend& backend, const Operands& in, const Operands& out);

template <class Call>
void run_op(const char* op, const Exec& ex, const Operands& in, const Operands& out, Call&& call) {
  const Backend& backend = ex.reference ? reference_backend() : *ex.backend;
  call(backend);
  if (OpObserver* o = op_observer()) [[unlikely]]
    notify_op(*o, op, backend, in, out);
}

}  // namespace mb::ops
