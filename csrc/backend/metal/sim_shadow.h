// metal-sim full checks: a shadow record of one threadgroup's 32 KiB of threadgroup memory, per byte in
// effect, for the race and uninitialised-read checks (sim_group.cpp drives it).
//
// Time is cut into epochs: a new group starts one, and so does every threadgroup_barrier whose flags
// include mem_threadgroup. Per byte the shadow keeps the last write and up to two reads of the current
// epoch, each with the thread, its simdgroup's simdgroup_barrier count and the code offset of the access.
// Two accesses by different threads in one epoch, at least one a write, race, unless both threads are in
// one simdgroup and a simdgroup_barrier(mem_threadgroup) came between them. A read of a byte not written
// since the group started (or the array was declared) reads undefined memory.
//
// Storage: one record per 4-byte word stands for all four bytes while every access to the word has covered
// it whole (the kernels' threadgroup arrays hold 4-byte types), so a float access checks one record, not
// four. The first access to part of a word splits it: its record is copied to each of its bytes, which
// are checked one by one from then on (until a declaration covers the word again). Four equal byte records
// give the same findings, at the same first byte, as their word record, so the checks are unchanged.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace mb::metal::sim {

class TgShadow {
 public:
  // One access of the shadow: who, and from where.
  struct Access {
    uint32_t stamp = 0;   // epoch (0: none)
    uint32_t code = 0;    // code offset of the access in the library (0: unknown)
    uint16_t thread = 0;  // thread_index_in_threadgroup
    uint16_t sync = 0;    // simdgroup_barrier count of its simdgroup at the time
  };
  enum class Finding : uint8_t { None, Race, Uninitialised };
  static constexpr size_t kWordBytes = 4;  // one record per word until a sub-word access splits it
  struct Report {
    Finding finding = Finding::None;
    size_t offset = 0;      // byte of threadgroup memory
    Access earlier;         // the other access of a race
    bool earlier_was_write = false;
  };

  TgShadow();
  // A new threadgroup: a new epoch in which no byte has been written.
  void begin_group();
  // A threadgroup_barrier(mem_threadgroup) released every thread.
  void next_epoch();
  // A declaration handed out [offset, offset + bytes): unwritten again.
  void declare(size_t offset, size_t bytes);
  // An atomic operation: its bytes count as written, and take no part in races.
  void note_atomic(size_t offset, size_t bytes);
  // A plain access by `me` (stamp filled in here). `sync_of(thread)` gives the current simdgroup_barrier
  // count of that thread's simdgroup. Returns the first finding, if any.
  template <class SyncOf>
  Report access(size_t offset, size_t bytes, bool write, Access me, SyncOf sync_of);

 private:
  struct Record {
    uint32_t written;  // epoch of the last write (plain or atomic); < group_start_: undefined
    Access write;
    Access read[2];
  };
  bool ordered(const Access& earlier, const Access& me, uint16_t earlier_sync_now) const;
  // Checks `me` against record `s` (of byte `b`, the first byte it stands for) and records it; false and
  // `rep` filled in on a finding.
  template <class SyncOf>
  bool check(Record& s, size_t b, bool write, const Access& me, SyncOf& sync_of, Report& rep);
  // Calls fn(record, its first byte) for the records covering [offset, offset + bytes): word
  // records for the words the range covers whole and that are not split, byte records otherwise (the
  // word split first); stops early when fn returns false.
  template <class Fn>
  void for_records(size_t offset, size_t bytes, Fn&& fn);
  void split(size_t word);  // the word's record copied to its four bytes' records
  void restart();           // the epoch counter wrapped: forget everything

  std::unique_ptr<Record[]> words_;  // [kThreadgroupMemoryBytes / 4]
  std::unique_ptr<Record[]> bytes_;  // [kThreadgroupMemoryBytes]: valid for split words only
  std::unique_ptr<bool[]> split_;    // [kThreadgroupMemoryBytes / 4]
  uint32_t stamp_ = 0, group_start_ = 0;
};

// ---- inline: runs on every threadgroup-memory access under full checks ----

// `earlier` and `me` do not race: another epoch, the same thread, or the same simdgroup with a
// simdgroup_barrier between them (its count moved on since `earlier`).
inline bool TgShadow::ordered(const Access& earlier, const Access& me, uint16_t earlier_sync_now) const {
  if (earlier.stamp != stamp_ || earlier.thread == me.thread) return true;
  return earlier.thread / 32 == me.thread / 32 && earlier.sync != earlier_sync_now;
}

template <class Fn>
void TgShadow::for_records(size_t offset, size_t bytes, Fn&& fn) {
  const size_t end = offset + bytes;
  for (size_t w = offset / kWordBytes, b0 = w * kWordBytes; b0 < end; ++w, b0 += kWordBytes) {
    const size_t first = offset > b0 ? offset : b0, last = end < b0 + kWordBytes ? end : b0 + kWordBytes;
    if (!split_[w]) {
      if (last - first == kWordBytes) {
        if (!fn(words_[w], first)) return;
        continue;
      }
      split(w);
    }
    for (size_t b = first; b < last; ++b)
      if (!fn(bytes_[b], b)) return;
  }
}

template <class SyncOf>
bool TgShadow::check(Record& s, size_t b, bool write, const Access& me, SyncOf& sync_of, Report& rep) {
  if (!write && s.written < group_start_) {
    rep.finding = Finding::Uninitialised;
    rep.offset = b;
    return false;
  }
  if (!ordered(s.write, me, sync_of(s.write.thread))) {
    rep = {Finding::Race, b, s.write, true};
    return false;
  }
  if (write) {
    for (const Access& r : s.read)
      if (!ordered(r, me, sync_of(r.thread))) {
        rep = {Finding::Race, b, r, false};
        return false;
      }
    s.written = stamp_;
    s.write = me;
  } else if (s.read[0].stamp != stamp_ || s.read[0].thread == me.thread) {
    s.read[0] = me;
  } else if (s.read[1].stamp != stamp_ || s.read[1].thread == me.thread) {
    s.read[1] = me;
  }  // else two other threads read it this epoch: any later write by a third thread races with both
  return true;
}

template <class SyncOf>
TgShadow::Report TgShadow::access(size_t offset, size_t bytes, bool write, Access me, SyncOf sync_of) {
  me.stamp = stamp_;
  Report rep;
  for_records(offset, bytes, [&](Record& s, size_t b) { return check(s, b, write, me, sync_of, rep); });
  return rep;
}

}  // namespace mb::metal::sim
