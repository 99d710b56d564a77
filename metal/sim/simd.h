// metal-sim: threadgroup_barrier and the simdgroup functions. Each simd_* call is one exchange among
// the active lanes of the caller's simdgroup (rt::simd_exchange); every lane then computes its own
// result from all deposited values, so all lanes agree exactly (sums run in lane order).
// Lanes that returned from the kernel are inactive: they contribute nothing, and reading an inactive
// lane's value (simd_shuffle from it) yields all-ones bits (NaN for floats), since Metal leaves it undefined.
#pragma once
#include <cstring>
#include <source_location>

#include "sim/math.h"
#include "sim/runtime.h"

namespace metal {

enum class mem_flags : unsigned { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4, mem_threadgroup_imageblock = 8 };
constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) | unsigned(b)); }

// All threads of the threadgroup wait here. The sim runs one group's threads on one OS thread, so memory
// is always coherent; the full checks treat threadgroup memory as ordered only by barriers whose flags
// include mem_threadgroup, as MSL does.
// Every simdgroup call takes a trailing defaulted `MB_SIM_SITE` parameter: the caller's source location,
// by which the full checks tell calls apart (kernels never pass it).
#define MB_SIM_SITE std::source_location mb_site = std::source_location::current()
#define MB_SIM_SITE_ARG (::metal_sim::rt::CallSite{mb_site.file_name(), mb_site.line(), mb_site.column()})
inline void threadgroup_barrier(mem_flags f) { ::metal_sim::rt::threadgroup_barrier(unsigned(f)); }
inline void simdgroup_barrier(mem_flags f, MB_SIM_SITE) {
  ::metal_sim::rt::simdgroup_barrier(unsigned(f), MB_SIM_SITE_ARG);
}

}  // namespace metal

namespace metal_sim::simd {

template <class T>
struct Round {
  rt::SimdRound r;
  inline Round(const T& v, rt::CallSite site) {
    static_assert(sizeof(T) <= rt::kSimdSlotBytes, "simd_*: value larger than the sim's exchange slot");
    static_assert(std::is_trivially_copyable_v<T>, "simd_*: only scalars and vectors can be exchanged");
    r = rt::simd_exchange(&v, sizeof(T), site);
  }
  bool active(uint32_t lane) const { return lane < uint32_t(rt::kSimdWidth) && ((r.active >> lane) & 1u); }
  // Lane `lane`'s value; an inactive or nonexistent lane reads as all-ones bits.
  T at(uint32_t lane) const {
    T v;
    if (active(lane)) std::memcpy(&v, r.slots + size_t(lane) * rt::kSimdSlotBytes, sizeof(T));
    else std::memset(&v, 0xFF, sizeof(T));
    return v;
  }
  uint32_t lane() const { return r.lane; }
};

// f folded over the values of the active lanes below `lanes_below`, in lane order. A fold over all 32 lanes is
// the same in every lane: the first lane computes it, the others take it from the round's memo. Out of line
// and not instrumented: the slots are the sim's own memory, which the load hooks have nothing to check.
template <class T, class F>
[[gnu::noinline]] __attribute__((no_sanitize("coverage"))) T fold(const Round<T>& rd, uint32_t lanes_below, F f,
                                                                  bool* any) {
  const void* key = reinterpret_cast<const void*>(&fold<T, F>);  // one per reduction (T and f's type)
  rt::SimdMemo& memo = *rd.r.memo;
  T acc{};
  if (lanes_below == 32u && memo.key == key) {
    std::memcpy(&acc, memo.value, sizeof(T));
    *any = memo.any;
    return acc;
  }
  *any = false;
  for (uint32_t l = 0; l < lanes_below; ++l) {
    if (!rd.active(l)) continue;
    acc = *any ? f(acc, rd.at(l)) : rd.at(l);
    *any = true;
  }
  if (lanes_below == 32u) {
    memo.key = key;
    memo.any = *any;
    std::memcpy(memo.value, &acc, sizeof(T));
  }
  return acc;
}

}  // namespace metal_sim::simd

namespace metal {

// Sum over the active lanes (in lane order).
template <class T>
inline T simd_sum(T x, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  bool any;
  return ::metal_sim::simd::fold(rd, 32u, [](T a, T b) { return T(a + b); }, &any);
}
template <class T>
inline T simd_product(T x, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  bool any;
  return ::metal_sim::simd::fold(rd, 32u, [](T a, T b) { return T(a * b); }, &any);
}
template <class T>
inline T simd_max(T x, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  bool any;
  return ::metal_sim::simd::fold(rd, 32u, [](T a, T b) { return max(a, b); }, &any);
}
template <class T>
inline T simd_min(T x, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  bool any;
  return ::metal_sim::simd::fold(rd, 32u, [](T a, T b) { return min(a, b); }, &any);
}
template <class T>
inline T simd_and(T x, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  bool any;
  return ::metal_sim::simd::fold(rd, 32u, [](T a, T b) { return T(a & b); }, &any);
}
template <class T>
inline T simd_or(T x, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  bool any;
  return ::metal_sim::simd::fold(rd, 32u, [](T a, T b) { return T(a | b); }, &any);
}
template <class T>
inline T simd_xor(T x, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  bool any;
  return ::metal_sim::simd::fold(rd, 32u, [](T a, T b) { return T(a ^ b); }, &any);
}
// Sum over the active lanes below the caller (exclusive: 0 for the first) or up to it (inclusive).
template <class T>
inline T simd_prefix_exclusive_sum(T x, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  bool any;
  T s = ::metal_sim::simd::fold(rd, rd.lane(), [](T a, T b) { return T(a + b); }, &any);
  return any ? s : T(0);
}
template <class T>
inline T simd_prefix_inclusive_sum(T x, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  bool any;
  return ::metal_sim::simd::fold(rd, rd.lane() + 1, [](T a, T b) { return T(a + b); }, &any);
}
template <class T>
inline T simd_prefix_exclusive_product(T x, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  bool any;
  T s = ::metal_sim::simd::fold(rd, rd.lane(), [](T a, T b) { return T(a * b); }, &any);
  return any ? s : T(1);
}
template <class T>
inline T simd_prefix_inclusive_product(T x, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  bool any;
  return ::metal_sim::simd::fold(rd, rd.lane() + 1, [](T a, T b) { return T(a * b); }, &any);
}

// The value of lane `lane`.
template <class T>
inline T simd_shuffle(T x, ushort lane, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  return rd.at(lane);
}
template <class T>
inline T simd_broadcast(T x, ushort lane, MB_SIM_SITE) { return simd_shuffle(x, lane, mb_site); }
template <class T>
inline T simd_broadcast_first(T x, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  for (uint32_t l = 0; l < 32; ++l)
    if (rd.active(l)) return rd.at(l);
  return x;
}
// From lane + delta; the upper `delta` lanes keep their own value.
template <class T>
inline T simd_shuffle_down(T x, ushort delta, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  uint32_t src = rd.lane() + delta;
  return src < 32 ? rd.at(src) : x;
}
// From lane - delta; the lower `delta` lanes keep their own value.
template <class T>
inline T simd_shuffle_up(T x, ushort delta, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  return rd.lane() >= delta ? rd.at(rd.lane() - delta) : x;
}
template <class T>
inline T simd_shuffle_xor(T x, ushort mask, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  return rd.at((rd.lane() ^ mask) & 31u);
}
template <class T>
inline T simd_shuffle_rotate_down(T x, ushort delta, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  return rd.at((rd.lane() + delta) & 31u);
}
template <class T>
inline T simd_shuffle_rotate_up(T x, ushort delta, MB_SIM_SITE) {
  ::metal_sim::simd::Round<T> rd(x, MB_SIM_SITE_ARG);
  return rd.at((rd.lane() + 32u - (delta & 31u)) & 31u);
}

inline bool simd_all(bool v, MB_SIM_SITE) {
  ::metal_sim::simd::Round<bool> rd(v, MB_SIM_SITE_ARG);
  for (uint32_t l = 0; l < 32; ++l)
    if (rd.active(l) && !rd.at(l)) return false;
  return true;
}
inline bool simd_any(bool v, MB_SIM_SITE) {
  ::metal_sim::simd::Round<bool> rd(v, MB_SIM_SITE_ARG);
  for (uint32_t l = 0; l < 32; ++l)
    if (rd.active(l) && rd.at(l)) return true;
  return false;
}
// One bit per active lane whose predicate is true (MSL's simd_vote as its integer value).
inline ulong simd_ballot(bool v, MB_SIM_SITE) {
  ::metal_sim::simd::Round<bool> rd(v, MB_SIM_SITE_ARG);
  ulong m = 0;
  for (uint32_t l = 0; l < 32; ++l)
    if (rd.active(l) && rd.at(l)) m |= ulong(1) << l;
  return m;
}
inline bool simd_is_first(MB_SIM_SITE) {
  ::metal_sim::simd::Round<bool> rd(true, MB_SIM_SITE_ARG);
  for (uint32_t l = 0; l < 32; ++l)
    if (rd.active(l)) return l == rd.lane();
  return false;
}

}  // namespace metal
