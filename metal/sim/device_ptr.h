// metal-sim: device_ptr<T>, the checked pointer every `DEVICE_PTR(T)` kernel parameter becomes.
// Every access (p[i], *p, p->m) checks that the bytes touched lie inside the bound buffer and that the
// address is aligned for T; a violation throws mb::DeviceError naming the kernel, buffer and offset.
// Pointer arithmetic itself is unchecked (as in C++, a pointer may point past the end until used).
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "sim/runtime.h"

namespace metal_sim {

template <class T>
class device_ptr {
 public:
  using element_type = T;

  device_ptr() = default;
  device_ptr(std::nullptr_t) {}
  device_ptr(const rt::BufferView* buffer, T* p) : buf_(buffer), p_(p) {}
  // device T* -> device const T*
  template <class U>
    requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>)
  device_ptr(const device_ptr<U>& o) : buf_(o.buffer()), p_(o.unchecked()) {}
  // Reinterpreting casts, as `(device const float4*)p` in MSL; const may be added, never dropped.
  template <class U>
    requires(!std::is_same_v<std::remove_cv_t<U>, std::remove_cv_t<T>> && (std::is_const_v<T> || !std::is_const_v<U>))
  explicit device_ptr(const device_ptr<U>& o) : buf_(o.buffer()), p_(reinterpret_cast<T*>(o.unchecked())) {}

  T& operator[](ptrdiff_t i) const { return *checked(p_ + i); }
  T& operator*() const { return *checked(p_); }
  T* operator->() const { return checked(p_); }

  device_ptr operator+(ptrdiff_t i) const { return {buf_, p_ + i}; }
  device_ptr operator-(ptrdiff_t i) const { return {buf_, p_ - i}; }
  friend device_ptr operator+(ptrdiff_t i, const device_ptr& p) { return p + i; }
  ptrdiff_t operator-(const device_ptr& o) const { return p_ - o.p_; }
  device_ptr& operator+=(ptrdiff_t i) { p_ += i; return *this; }
  device_ptr& operator-=(ptrdiff_t i) { p_ -= i; return *this; }
  device_ptr& operator++() { ++p_; return *this; }
  device_ptr& operator--() { --p_; return *this; }
  device_ptr operator++(int) { device_ptr t = *this; ++p_; return t; }
  device_ptr operator--(int) { device_ptr t = *this; --p_; return t; }
  bool operator==(const device_ptr& o) const { return p_ == o.p_; }
  auto operator<=>(const device_ptr& o) const { return p_ <=> o.p_; }
  explicit operator bool() const { return p_ != nullptr; }

  // For the sim's own built-ins (atomics, simdgroup_load): the pointer after checking n elements.
  T* checked_range(ptrdiff_t first, size_t n) const {
    if (n == 0) return p_ + first;
    checked(p_ + first + ptrdiff_t(n) - 1);
    return checked(p_ + first);
  }
  const rt::BufferView* buffer() const { return buf_; }
  T* unchecked() const { return p_; }

 private:
  T* checked(T* q) const {
    if (!buf_) rt::fail("access through a null device pointer");
    const long long off = (long long)(reinterpret_cast<uintptr_t>(q) - reinterpret_cast<uintptr_t>(buf_->data));
    const bool misaligned = reinterpret_cast<uintptr_t>(q) % alignof(T) != 0;
    if (off < 0 || (unsigned long long)off + sizeof(T) > buf_->bytes || misaligned)
      rt::fail_access(*buf_, off, sizeof(T), misaligned && off >= 0 && (unsigned long long)off + sizeof(T) <= buf_->bytes);
    return q;
  }

  const rt::BufferView* buf_ = nullptr;
  T* p_ = nullptr;
};

template <class T> struct is_device_ptr : std::false_type {};
template <class T> struct is_device_ptr<device_ptr<T>> : std::true_type {};

}  // namespace metal_sim
