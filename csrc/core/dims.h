// Dims: a tensor's shape or strides, held inline (at most kMaxDims entries), so making a tensor or a view
// never allocates: a decode step creates hundreds of views and performs no heap allocation.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <vector>

namespace mb {

class Dims {
 public:
  static constexpr size_t kMaxDims = 8;
  using value_type = int64_t;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;

  Dims() = default;
  Dims(std::initializer_list<int64_t> v) { assign(v.begin(), v.end()); }
  explicit Dims(size_t n, int64_t value = 0) {
    check(n);
    n_ = uint8_t(n);
    std::fill_n(v_, n, value);
  }
  template <class It, class = decltype(*std::declval<It>())>
  Dims(It first, It last) { assign(first, last); }
  Dims(const std::vector<int64_t>& v) { assign(v.begin(), v.end()); }  // NOLINT: implicit, as a vector was

  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t& operator[](size_t i) { return v_[i]; }
  int64_t operator[](size_t i) const { return v_[i]; }
  int64_t* data() { return v_; }
  const int64_t* data() const { return v_; }
  iterator begin() { return v_; }
  iterator end() { return v_ + n_; }
  const_iterator begin() const { return v_; }
  const_iterator end() const { return v_ + n_; }
  int64_t& back() { return v_[n_ - 1]; }
  int64_t back() const { return v_[n_ - 1]; }
  int64_t front() const { return v_[0]; }
  void push_back(int64_t x) {
    check(size_t(n_) + 1);
    v_[n_++] = x;
  }
  void pop_back() { --n_; }
  void resize(size_t n, int64_t value = 0) {
    check(n);
    for (size_t i = n_; i < n; ++i) v_[i] = value;
    n_ = uint8_t(n);
  }
  iterator insert(const_iterator pos, int64_t x) {
    check(size_t(n_) + 1);
    const size_t at = size_t(pos - v_);
    std::copy_backward(v_ + at, v_ + n_, v_ + n_ + 1);
    v_[at] = x;
    ++n_;
    return v_ + at;
  }
  iterator erase(const_iterator pos) {
    const size_t at = size_t(pos - v_);
    std::copy(v_ + at + 1, v_ + n_, v_ + at);
    --n_;
    return v_ + at;
  }
  std::vector<int64_t> to_vector() const { return {begin(), end()}; }

  friend bool operator==(const Dims& a, const Dims& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }
  friend bool operator!=(const Dims& a, const Dims& b) { return !(a == b); }

 private:
  template <class It>
  void assign(It first, It last) {
    size_t n = 0;
    for (It it = first; it != last; ++it) {
      check(n + 1);
      v_[n++] = int64_t(*it);
    }
    n_ = uint8_t(n);
  }
  // Over kMaxDims is a std::length_error (the front doors turn it into an InputError naming the tensor).
  static void check(size_t n) {
    if (n > kMaxDims) throw std::length_error("markbase tensors have at most 8 dimensions");
  }

  int64_t v_[kMaxDims] = {};
  uint8_t n_ = 0;
};

}  // namespace mb
