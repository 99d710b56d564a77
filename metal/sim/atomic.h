// metal-sim: MSL atomics (atomic_int, atomic_uint, atomic_float) in device or threadgroup memory.
// Threadgroups run in parallel on several OS threads, so device atomics are real CPU atomics.
// Only memory_order_relaxed exists in MSL; the sim uses relaxed CPU atomics as well.
#pragma once
#include <atomic>

#include "sim/device_ptr.h"
#include "sim/runtime.h"
#include "sim/types.h"

namespace metal {

enum memory_order { memory_order_relaxed = 0 };

// Same size and alignment as T, as in MSL (a buffer of uint can be bound as atomic_uint).
template <class T>
struct atomic {
  T value;
};
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<float> atomic_float;

namespace sim_detail {
// A plain pointer is threadgroup (or thread) memory: the full checks count its bytes as written.
template <class T> inline atomic<T>* ptr(atomic<T>* p) {
  ::metal_sim::rt::note_threadgroup_atomic(p, sizeof(T));
  return p;
}
template <class T> inline atomic<T>* ptr(volatile atomic<T>* p) { return ptr(const_cast<atomic<T>*>(p)); }
template <class T> inline atomic<T>* ptr(::metal_sim::device_ptr<atomic<T>> p) { return p.checked_range(0, 1); }
template <class T> inline std::atomic_ref<T> ref(atomic<T>* p) { return std::atomic_ref<T>(p->value); }
template <class P> using value_of = decltype(ptr(std::declval<P>())->value);

// fetch_max / fetch_min: stores v while replace(current, v) holds (compare-exchange loop); returns the
// value it found.
template <class P, class Replace>
inline auto fetch_replace_while(P obj, value_of<P> v, Replace replace) {
  auto r = ref(ptr(obj));
  auto cur = r.load(std::memory_order_relaxed);
  while (replace(cur, v) && !r.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {}
  return cur;
}
}  // namespace sim_detail

template <class P>
inline void atomic_store_explicit(P obj, sim_detail::value_of<P> v, memory_order) {
  sim_detail::ref(sim_detail::ptr(obj)).store(v, std::memory_order_relaxed);
}
template <class P>
inline auto atomic_load_explicit(P obj, memory_order) {
  return sim_detail::ref(sim_detail::ptr(obj)).load(std::memory_order_relaxed);
}
template <class P>
inline auto atomic_exchange_explicit(P obj, sim_detail::value_of<P> v, memory_order) {
  return sim_detail::ref(sim_detail::ptr(obj)).exchange(v, std::memory_order_relaxed);
}
template <class P>
inline bool atomic_compare_exchange_weak_explicit(P obj, sim_detail::value_of<P>* expected, sim_detail::value_of<P> desired,
                                                  memory_order, memory_order) {
  return sim_detail::ref(sim_detail::ptr(obj)).compare_exchange_weak(*expected, desired, std::memory_order_relaxed);
}
template <class P>
inline auto atomic_fetch_add_explicit(P obj, sim_detail::value_of<P> v, memory_order) {
  return sim_detail::ref(sim_detail::ptr(obj)).fetch_add(v, std::memory_order_relaxed);
}
template <class P>
inline auto atomic_fetch_sub_explicit(P obj, sim_detail::value_of<P> v, memory_order) {
  return sim_detail::ref(sim_detail::ptr(obj)).fetch_sub(v, std::memory_order_relaxed);
}
template <class P>
inline auto atomic_fetch_and_explicit(P obj, sim_detail::value_of<P> v, memory_order) {
  return sim_detail::ref(sim_detail::ptr(obj)).fetch_and(v, std::memory_order_relaxed);
}
template <class P>
inline auto atomic_fetch_or_explicit(P obj, sim_detail::value_of<P> v, memory_order) {
  return sim_detail::ref(sim_detail::ptr(obj)).fetch_or(v, std::memory_order_relaxed);
}
template <class P>
inline auto atomic_fetch_max_explicit(P obj, sim_detail::value_of<P> v, memory_order) {
  return sim_detail::fetch_replace_while(obj, v, [](auto cur, auto val) { return cur < val; });
}
template <class P>
inline auto atomic_fetch_min_explicit(P obj, sim_detail::value_of<P> v, memory_order) {
  return sim_detail::fetch_replace_while(obj, v, [](auto cur, auto val) { return val < cur; });
}

}  // namespace metal
