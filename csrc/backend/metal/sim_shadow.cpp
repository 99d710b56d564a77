#include "backend/metal/sim_shadow.h"

#include <cstring>

#include "sim/runtime.h"

namespace mb::metal::sim {

namespace rt = metal_sim::rt;

TgShadow::TgShadow() : bytes_(new Byte[rt::kThreadgroupMemoryBytes]) { restart(); }

void TgShadow::restart() {
  std::memset(static_cast<void*>(bytes_.get()), 0, sizeof(Byte) * rt::kThreadgroupMemoryBytes);
  stamp_ = group_start_ = 0;
}

void TgShadow::begin_group() {
  if (stamp_ > UINT32_MAX - 2 * rt::kMaxThreadsPerGroup) restart();
  group_start_ = ++stamp_;
}

void TgShadow::next_epoch() {
  if (stamp_ == UINT32_MAX) restart();  // a group with 4e9 barriers; losing one epoch's records is harmless
  ++stamp_;
}

void TgShadow::declare(size_t offset, size_t bytes) {
  for (size_t b = offset; b < offset + bytes; ++b) bytes_[b] = Byte{};
}

void TgShadow::note_atomic(size_t offset, size_t bytes) {
  for (size_t b = offset; b < offset + bytes && b < rt::kThreadgroupMemoryBytes; ++b) bytes_[b].written = stamp_;
}

}  // namespace mb::metal::sim
