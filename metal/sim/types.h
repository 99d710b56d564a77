// metal-sim: MSL scalar and vector types as clang ext_vector_types (swizzles .x .xy .xyzw .rgba work
// natively), `half` as _Float16, `bfloat` as __bf16, and MSL's constructor syntax `float4(a.xy, b, c)`
// (see msl_keywords.h for the macros that route `float4(...)` here).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef _Float16 half;
typedef __bf16 bfloat;

namespace metal_sim {

template <class T, int N>
using vec = T __attribute__((ext_vector_type(N)));

// vec_traits<V>: is_vector, element type, number of elements (1 for scalars).
template <class V>
struct vec_traits {
  static constexpr bool is_vector = false;
  static constexpr int size = 1;
  using element = V;
};
template <class T, int N>
struct vec_traits<T __attribute__((ext_vector_type(N)))> {
  static constexpr bool is_vector = true;
  static constexpr int size = N;
  using element = T;
};
template <class V> using element_t = typename vec_traits<std::remove_cvref_t<V>>::element;
template <class V> constexpr bool is_vector_v = vec_traits<std::remove_cvref_t<V>>::is_vector;
template <class V> constexpr int vec_size_v = vec_traits<std::remove_cvref_t<V>>::size;

template <class T>
constexpr bool is_float_scalar_v = std::is_same_v<T, float> || std::is_same_v<T, half> || std::is_same_v<T, bfloat> ||
                                   std::is_same_v<T, double>;
template <class V> constexpr bool is_float_v = is_float_scalar_v<element_t<V>>;
template <class V> constexpr bool is_integer_v = std::is_integral_v<element_t<V>> && !std::is_same_v<element_t<V>, bool>;

// Element-wise conversion between scalar element types (MSL conversions round to nearest even).
template <class To, class From>
inline To convert_scalar(From v) {
  if constexpr (std::is_same_v<To, bool>) return v != From(0);
  else return static_cast<To>(v);
}

namespace detail {
template <class T, int N, class A>
inline void append(vec<T, N>& r, int& k, const A& a) {
  if constexpr (is_vector_v<A>) {
    for (int j = 0; j < vec_size_v<A>; ++j) r[k++] = convert_scalar<T>(a[j]);
  } else {
    r[k++] = convert_scalar<T>(a);
  }
}
}  // namespace detail

// MSL vector constructors: T N() zero, T N(scalar) splat, T N(vector of N) element conversion,
// T N(a, b, ...) concatenation of scalars and vectors with N elements in total.
template <class T, int N, class... A>
inline vec<T, N> make_vec(const A&... a) {
  vec<T, N> r{};
  if constexpr (sizeof...(A) == 1 && !(is_vector_v<A> && ...)) {
    for (int j = 0; j < N; ++j) r[j] = convert_scalar<T>(a...);
  } else {
    static_assert(sizeof...(A) == 0 || (vec_size_v<A> + ...) == N,
                  "MSL vector constructor: the arguments must have exactly N elements in total");
    int k = 0;
    (detail::append<T, N>(r, k, a), ...);
  }
  return r;
}

}  // namespace metal_sim

// The vector type names of MSL (global, as in MSL). Constructor calls `float4(...)` are macros
// (msl_keywords.h) because a typedef cannot take several constructor arguments in C++.
#define MB_SIM_VECTOR_TYPES(T, name)                 \
  typedef ::metal_sim::vec<T, 2> name##2;            \
  typedef ::metal_sim::vec<T, 3> name##3;            \
  typedef ::metal_sim::vec<T, 4> name##4;
MB_SIM_VECTOR_TYPES(float, float)
MB_SIM_VECTOR_TYPES(half, half)
MB_SIM_VECTOR_TYPES(bfloat, bfloat)
MB_SIM_VECTOR_TYPES(int, int)
MB_SIM_VECTOR_TYPES(uint, uint)
MB_SIM_VECTOR_TYPES(short, short)
MB_SIM_VECTOR_TYPES(ushort, ushort)
MB_SIM_VECTOR_TYPES(signed char, char)
MB_SIM_VECTOR_TYPES(uchar, uchar)
MB_SIM_VECTOR_TYPES(long, long)
MB_SIM_VECTOR_TYPES(ulong, ulong)
MB_SIM_VECTOR_TYPES(bool, bool)
#undef MB_SIM_VECTOR_TYPES

namespace metal {

template <class T, int N> using vec = ::metal_sim::vec<T, N>;

// as_type<T>(x): reinterprets the bits (sizes must match), e.g. as_type<uint>(1.0f).
template <class To, class From>
inline To as_type(const From& v) {
  static_assert(sizeof(To) == sizeof(From), "as_type: source and destination sizes differ");
  return __builtin_bit_cast(To, v);
}

}  // namespace metal
