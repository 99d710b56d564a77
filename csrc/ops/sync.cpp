#include "ops/sync.h"

#include "backend/backend.h"

namespace mb::ops {

CommandScope::~CommandScope() {
  if (finished_) return;
  try {
    backend_->synchronize();
  } catch (...) {
  }
}

void CommandScope::finish() {
  finished_ = true;
  backend_->synchronize();
}

void synchronize(const Exec& ex) { ex.backend->synchronize(); }

}  // namespace mb::ops
