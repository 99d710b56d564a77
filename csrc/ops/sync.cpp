#include "ops/sync.h"

#include "backend/metal/launcher.h"

namespace mb::ops {

CommandScope::~CommandScope() {
  if (finished_) return;
  try {
    metal::synchronize_device(device_);
  } catch (...) {
  }
}

void CommandScope::finish() {
  finished_ = true;
  metal::synchronize_device(device_);
}

void synchronize(const Exec& ex) { metal::synchronize_device(ex.device); }

}  // namespace mb::ops
