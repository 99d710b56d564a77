// Command-buffer scope for code that calls ops (backend/metal/launcher.h has the model): on a deferred
// backend (Backend::deferred(), e.g. Metal) ops only encode work; whoever needs the results — a model
// forward, a Python op binding — opens a CommandScope, calls ops, and finish() commits the command
// buffer once and waits (Backend::synchronize()). On the CPU every op has finished when it returns and
// the scope does nothing.
#pragma once
#include "ops/exec.h"

namespace mb::ops {

class CommandScope {
 public:
  explicit CommandScope(const Exec& ex) : backend_(ex.backend) {}
  CommandScope(const CommandScope&) = delete;
  CommandScope& operator=(const CommandScope&) = delete;
  // If finish() was not reached (an op threw), drains what was encoded so no stale work runs later;
  // errors of that drain are dropped in favour of the exception already in flight.
  ~CommandScope();
  // Commits and waits; device faults found while running are DeviceError here.
  void finish();

 private:
  const Backend* backend_;
  bool finished_ = false;
};

// Commits and waits for everything encoded on `ex.backend` so far (no-op on the CPU).
void synchronize(const Exec& ex);

}  // namespace mb::ops
