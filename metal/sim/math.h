// metal-sim: the metal:: math library on the CPU. Every function exists in metal::precise and
// metal::fast; metal::NAME is the precise one (markbase compiles MSL with fast math off). The sim's
// "fast" variants are precise too: the sim checks semantics, not the accuracy of Apple's fast paths.
// Scalars and vectors of float / half / bfloat; half and bfloat compute in float and round once.
#pragma once
#include <cfloat>
#include <cmath>

#include "sim/types.h"

#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.434294481903251827651f
#define M_LN2_F 0.693147180559945309417f
#define M_LN10_F 2.30258509299404568402f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.785398163397448309616f
#define M_1_PI_F 0.318309886183790671538f
#define M_2_PI_F 0.636619772367581343076f
#define M_2_SQRTPI_F 1.12837916709551257390f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.707106781186547524401f
#ifndef MAXFLOAT
#define MAXFLOAT FLT_MAX
#endif

namespace metal_sim::math {

// Scalar math runs in float for half / bfloat / float, in double for double.
template <class E> using calc_t = std::conditional_t<std::is_same_v<E, double>, double, float>;

template <class V, class F>
inline V map1(const V& x, F f) {
  if constexpr (is_vector_v<V>) {
    V r{};
    for (int i = 0; i < vec_size_v<V>; ++i) r[i] = f(element_t<V>(x[i]));
    return r;
  } else {
    return f(x);
  }
}
template <class V, class F>
inline V map2(const V& a, const V& b, F f) {
  if constexpr (is_vector_v<V>) {
    V r{};
    for (int i = 0; i < vec_size_v<V>; ++i) r[i] = f(element_t<V>(a[i]), element_t<V>(b[i]));
    return r;
  } else {
    return f(a, b);
  }
}
template <class V, class F>
inline V map3(const V& a, const V& b, const V& c, F f) {
  if constexpr (is_vector_v<V>) {
    V r{};
    for (int i = 0; i < vec_size_v<V>; ++i) r[i] = f(element_t<V>(a[i]), element_t<V>(b[i]), element_t<V>(c[i]));
    return r;
  } else {
    return f(a, b, c);
  }
}
// A predicate per element: bool for scalars, boolN for vectors.
template <class V, class F>
inline auto test1(const V& x, F f) {
  if constexpr (is_vector_v<V>) {
    vec<bool, vec_size_v<V>> r{};
    for (int i = 0; i < vec_size_v<V>; ++i) r[i] = f(element_t<V>(x[i]));
    return r;
  } else {
    return bool(f(x));
  }
}
template <class V> inline V splat(element_t<V> s) {
  if constexpr (is_vector_v<V>) return make_vec<element_t<V>, vec_size_v<V>>(s);
  else return s;
}

}  // namespace metal_sim::math

namespace metal {
namespace precise {

#define MB_SIM_FLOAT_FN1(name, expr)                                                        \
  template <class V> requires ::metal_sim::is_float_v<V>                                    \
  inline V name(V x) {                                                                      \
    return ::metal_sim::math::map1(x, [](auto v) {                                          \
      using E = decltype(v);                                                                \
      using C = ::metal_sim::math::calc_t<E>;                                               \
      const C t = C(v);                                                                     \
      return E(expr);                                                                       \
    });                                                                                     \
  }
#define MB_SIM_FLOAT_FN2(name, expr)                                                        \
  template <class V> requires ::metal_sim::is_float_v<V>                                    \
  inline V name(V x, V y) {                                                                 \
    return ::metal_sim::math::map2(x, y, [](auto v, auto w) {                               \
      using E = decltype(v);                                                                \
      using C = ::metal_sim::math::calc_t<E>;                                               \
      const C t = C(v), u = C(w);                                                           \
      return E(expr);                                                                       \
    });                                                                                     \
  }

MB_SIM_FLOAT_FN1(exp, std::exp(t))
MB_SIM_FLOAT_FN1(exp2, std::exp2(t))
MB_SIM_FLOAT_FN1(exp10, std::pow(C(10), t))
MB_SIM_FLOAT_FN1(log, std::log(t))
MB_SIM_FLOAT_FN1(log2, std::log2(t))
MB_SIM_FLOAT_FN1(log10, std::log10(t))
MB_SIM_FLOAT_FN1(sqrt, std::sqrt(t))
MB_SIM_FLOAT_FN1(rsqrt, C(1) / std::sqrt(t))
MB_SIM_FLOAT_FN1(cbrt, std::cbrt(t))
MB_SIM_FLOAT_FN1(sin, std::sin(t))
MB_SIM_FLOAT_FN1(cos, std::cos(t))
MB_SIM_FLOAT_FN1(tan, std::tan(t))
MB_SIM_FLOAT_FN1(asin, std::asin(t))
MB_SIM_FLOAT_FN1(acos, std::acos(t))
MB_SIM_FLOAT_FN1(atan, std::atan(t))
MB_SIM_FLOAT_FN1(sinh, std::sinh(t))
MB_SIM_FLOAT_FN1(cosh, std::cosh(t))
MB_SIM_FLOAT_FN1(tanh, std::tanh(t))
MB_SIM_FLOAT_FN1(asinh, std::asinh(t))
MB_SIM_FLOAT_FN1(acosh, std::acosh(t))
MB_SIM_FLOAT_FN1(atanh, std::atanh(t))
MB_SIM_FLOAT_FN1(floor, std::floor(t))
MB_SIM_FLOAT_FN1(ceil, std::ceil(t))
MB_SIM_FLOAT_FN1(round, std::round(t))
MB_SIM_FLOAT_FN1(rint, std::rint(t))
MB_SIM_FLOAT_FN1(trunc, std::trunc(t))
MB_SIM_FLOAT_FN1(fract, std::fmin(t - std::floor(t), C(0x1.fffffep-1f)))
MB_SIM_FLOAT_FN1(fabs, std::fabs(t))
MB_SIM_FLOAT_FN1(saturate, std::fmin(std::fmax(t, C(0)), C(1)))
MB_SIM_FLOAT_FN1(sign, t > C(0) ? C(1) : (t < C(0) ? C(-1) : (t == t ? C(0) * t : t)))
MB_SIM_FLOAT_FN2(pow, std::pow(t, u))
MB_SIM_FLOAT_FN2(powr, std::pow(t, u))
MB_SIM_FLOAT_FN2(atan2, std::atan2(t, u))
MB_SIM_FLOAT_FN2(fmod, std::fmod(t, u))
MB_SIM_FLOAT_FN2(fmin, std::fmin(t, u))
MB_SIM_FLOAT_FN2(fmax, std::fmax(t, u))
MB_SIM_FLOAT_FN2(fdim, std::fdim(t, u))
MB_SIM_FLOAT_FN2(copysign, std::copysign(t, u))
MB_SIM_FLOAT_FN2(divide, t / u)
MB_SIM_FLOAT_FN2(step, u < t ? C(0) : C(1))  // step(edge, x): 0 if x < edge
#undef MB_SIM_FLOAT_FN1
#undef MB_SIM_FLOAT_FN2

template <class V> requires ::metal_sim::is_float_v<V>
inline V fma(V a, V b, V c) {
  return ::metal_sim::math::map3(a, b, c, [](auto x, auto y, auto z) {
    using E = decltype(x);
    using C = ::metal_sim::math::calc_t<E>;
    return E(std::fma(C(x), C(y), C(z)));
  });
}

// mix(x, y, a) = x + (y - x) * a
template <class V> requires ::metal_sim::is_float_v<V>
inline V mix(V x, V y, V a) {
  return ::metal_sim::math::map3(x, y, a, [](auto p, auto q, auto t) {
    using E = decltype(p);
    using C = ::metal_sim::math::calc_t<E>;
    return E(C(p) + (C(q) - C(p)) * C(t));
  });
}

// abs / min / max / clamp for float and integer types. For floats min and max follow fmin / fmax
// (a NaN operand yields the other operand), as on Apple GPUs: kernels that must propagate NaN
// compare explicitly.
template <class V>
inline V abs(V x) {
  if constexpr (::metal_sim::is_float_v<V>) return fabs(x);
  else return ::metal_sim::math::map1(x, [](auto v) { return decltype(v)(v < 0 ? -v : v); });
}
template <class V>
inline V max(V a, V b) {
  if constexpr (::metal_sim::is_float_v<V>) return fmax(a, b);
  else return ::metal_sim::math::map2(a, b, [](auto x, auto y) { return x < y ? y : x; });
}
template <class V>
inline V min(V a, V b) {
  if constexpr (::metal_sim::is_float_v<V>) return fmin(a, b);
  else return ::metal_sim::math::map2(a, b, [](auto x, auto y) { return y < x ? y : x; });
}
template <class V> requires ::metal_sim::is_vector_v<V>
inline V max(V a, ::metal_sim::element_t<V> b) { return max(a, ::metal_sim::math::splat<V>(b)); }
template <class V> requires ::metal_sim::is_vector_v<V>
inline V min(V a, ::metal_sim::element_t<V> b) { return min(a, ::metal_sim::math::splat<V>(b)); }
// clamp(x, lo, hi) = min(max(x, lo), hi); a NaN x gives lo (fmax semantics), as on Apple GPUs.
template <class V>
inline V clamp(V x, V lo, V hi) { return min(max(x, lo), hi); }
template <class V> requires ::metal_sim::is_vector_v<V>
inline V clamp(V x, ::metal_sim::element_t<V> lo, ::metal_sim::element_t<V> hi) {
  return clamp(x, ::metal_sim::math::splat<V>(lo), ::metal_sim::math::splat<V>(hi));
}

// Relational functions: bool for scalars, boolN for vectors.
template <class V> requires ::metal_sim::is_float_v<V>
inline auto isnan(V x) { return ::metal_sim::math::test1(x, [](auto v) { return std::isnan(float(v)); }); }
template <class V> requires ::metal_sim::is_float_v<V>
inline auto isinf(V x) { return ::metal_sim::math::test1(x, [](auto v) { return std::isinf(float(v)); }); }
template <class V> requires ::metal_sim::is_float_v<V>
inline auto isfinite(V x) { return ::metal_sim::math::test1(x, [](auto v) { return std::isfinite(float(v)); }); }
template <class V> requires ::metal_sim::is_float_v<V>
inline auto signbit(V x) { return ::metal_sim::math::test1(x, [](auto v) { return std::signbit(float(v)); }); }

// all / any over a boolN or a comparison mask (clang's vector comparisons give -1 / 0 integers).
template <class V>
inline bool all(V m) {
  if constexpr (::metal_sim::is_vector_v<V>) {
    for (int i = 0; i < ::metal_sim::vec_size_v<V>; ++i)
      if (!m[i]) return false;
    return true;
  } else {
    return bool(m);
  }
}
template <class V>
inline bool any(V m) {
  if constexpr (::metal_sim::is_vector_v<V>) {
    for (int i = 0; i < ::metal_sim::vec_size_v<V>; ++i)
      if (m[i]) return true;
    return false;
  } else {
    return bool(m);
  }
}

// select(a, b, c): c ? b : a, per element for vectors (c a boolN, a comparison mask or one bool).
template <class V, class M>
inline V select(V a, V b, M c) {
  if constexpr (::metal_sim::is_vector_v<V>) {
    V r{};
    for (int i = 0; i < ::metal_sim::vec_size_v<V>; ++i) {
      bool ci;
      if constexpr (::metal_sim::is_vector_v<M>) ci = bool(c[i]);
      else ci = bool(c);
      r[i] = ci ? b[i] : a[i];
    }
    return r;
  } else {
    return bool(c) ? b : a;
  }
}

// Geometric functions, summed in element order in the element type's calc precision.
template <class V> requires(::metal_sim::is_float_v<V> && ::metal_sim::is_vector_v<V>)
inline ::metal_sim::element_t<V> dot(V a, V b) {
  using E = ::metal_sim::element_t<V>;
  ::metal_sim::math::calc_t<E> s = 0;
  for (int i = 0; i < ::metal_sim::vec_size_v<V>; ++i) s += ::metal_sim::math::calc_t<E>(a[i]) * ::metal_sim::math::calc_t<E>(b[i]);
  return E(s);
}
template <class V> requires(::metal_sim::is_float_v<V> && ::metal_sim::is_vector_v<V>)
inline ::metal_sim::element_t<V> length(V a) { return sqrt(dot(a, a)); }
template <class V> requires(::metal_sim::is_float_v<V> && ::metal_sim::is_vector_v<V>)
inline V normalize(V a) { return a * rsqrt(dot(a, a)); }

}  // namespace precise

// Fast math is off in markbase: metal::NAME and metal::fast::NAME are the precise functions.
namespace fast {
using namespace precise;
}
using namespace precise;

}  // namespace metal
