#include "runtime/trace.h"

namespace mb::runtime {

namespace detail {
thread_local TraceObserver* trace_observer = nullptr;
}

TraceObserver* set_trace_observer(TraceObserver* observer) {
  TraceObserver* prev = detail::trace_observer;
  detail::trace_observer = observer;
  return prev;
}

}  // namespace mb::runtime
