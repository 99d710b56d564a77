#include "backend/metal/sim_shadow.h"

#include <algorithm>
#include <cstring>

#include "sim/runtime.h"

namespace mb::metal::sim {

namespace rt = metal_sim::rt;

constexpr size_t kWords = rt::kThreadgroupMemoryBytes / TgShadow::kWordBytes;
static_assert(rt::kThreadgroupMemoryBytes % TgShadow::kWordBytes == 0);

TgShadow::TgShadow()
    : words_(new Record[kWords]), bytes_(new Record[rt::kThreadgroupMemoryBytes]), split_(new bool[kWords]) {
  restart();
}

void TgShadow::restart() {
  std::memset(static_cast<void*>(words_.get()), 0, sizeof(Record) * kWords);
  std::memset(split_.get(), 0, kWords);
  stamp_ = group_start_ = 0;
}

void TgShadow::split(size_t word) {
  for (size_t i = 0; i < kWordBytes; ++i) bytes_[word * kWordBytes + i] = words_[word];
  split_[word] = true;
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
  // A word the declaration covers whole is one record again; the bytes of a partly covered one are reset.
  for (size_t w = (offset + kWordBytes - 1) / kWordBytes; (w + 1) * kWordBytes <= offset + bytes; ++w) split_[w] = false;
  for_records(offset, bytes, [](Record& r, size_t) { return r = Record{}, true; });
}

void TgShadow::note_atomic(size_t offset, size_t bytes) {
  if (offset >= rt::kThreadgroupMemoryBytes) return;
  bytes = std::min(bytes, rt::kThreadgroupMemoryBytes - offset);
  for_records(offset, bytes, [this](Record& r, size_t) { return r.written = stamp_, true; });
}

}  // namespace mb::metal::sim
