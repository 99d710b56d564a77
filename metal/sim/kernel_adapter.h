// metal-sim: maps a dispatch's bindings onto a kernel's parameters and registers kernels by name.
// A kernel's parameters are, in order: buffers ([[buffer(0)]], [[buffer(1)]], ...) each either a
// DEVICE_PTR(const T) / DEVICE_PTR(T) (a device_ptr<T>) or, last, `constant Args& args` (the dispatch's
// argument blob); then the fixed MB_THREAD_POSITION parameters (kernel_common.h).
#pragma once
#include <cstddef>
#include <type_traits>
#include <tuple>
#include <utility>

#include "sim/device_ptr.h"
#include "sim/runtime.h"
#include "sim/types.h"

namespace metal_sim {

// The trailing thread-position parameters, in MB_THREAD_POSITION order.
constexpr int kThreadParams = 8;

template <class... P> struct type_list {};
template <size_t I, class... P> using nth_t = std::tuple_element_t<I, std::tuple<P...>>;

template <class P>
constexpr rt::ParamKind param_kind() {
  if constexpr (is_device_ptr<P>::value) {
    return std::is_const_v<typename P::element_type> ? rt::ParamKind::DeviceConst : rt::ParamKind::DeviceWritable;
  } else {
    static_assert(std::is_lvalue_reference_v<P> && std::is_const_v<std::remove_reference_t<P>> &&
                      std::is_trivially_copyable_v<std::remove_cvref_t<P>>,
                  "metal-sim kernel parameter: expected DEVICE_PTR(T) or `constant Args& args` before MB_THREAD_POSITION");
    return rt::ParamKind::ConstantArgs;
  }
}

template <class P>
constexpr uint32_t param_elem_bytes() {
  if constexpr (is_device_ptr<P>::value) return uint32_t(sizeof(typename P::element_type));
  else return uint32_t(sizeof(std::remove_cvref_t<P>));
}

template <class P>
inline P bind_param(const rt::CallArgs& c, int i) {
  if constexpr (is_device_ptr<P>::value) {
    using T = typename P::element_type;
    return P(&c.buffers[i], reinterpret_cast<T*>(c.buffers[i].data));
  } else {
    return *static_cast<const std::remove_cvref_t<P>*>(c.args);
  }
}

inline uint3 u3(const uint32_t (&v)[3]) { return uint3{v[0], v[1], v[2]}; }

template <auto Fn, class... P, size_t... I>
inline void invoke_with(const rt::CallArgs& c, const rt::ThreadPos& t, std::index_sequence<I...>) {
  Fn(bind_param<nth_t<I, P...>>(c, int(I))..., u3(t.thread_in_grid), u3(t.thread_in_group), u3(t.group_in_grid),
     u3(t.threads_per_group), u3(t.groups_per_grid), uint(t.index_in_group), uint(t.simd_lane), uint(t.simd_group));
}

template <auto Fn, class... P>
inline void invoke(const rt::CallArgs& c, const rt::ThreadPos& t) {
  invoke_with<Fn, P...>(c, t, std::make_index_sequence<sizeof...(P) - kThreadParams>{});
}

template <class... P>
constexpr void check_thread_params() {
  static_assert(sizeof...(P) >= kThreadParams, "metal-sim kernel: the parameter list must end with MB_THREAD_POSITION");
  constexpr size_t n = sizeof...(P);
  static_assert(std::is_same_v<nth_t<n - 8, P...>, uint3> && std::is_same_v<nth_t<n - 7, P...>, uint3> &&
                    std::is_same_v<nth_t<n - 6, P...>, uint3> && std::is_same_v<nth_t<n - 5, P...>, uint3> &&
                    std::is_same_v<nth_t<n - 4, P...>, uint3> && std::is_same_v<nth_t<n - 3, P...>, uint> &&
                    std::is_same_v<nth_t<n - 2, P...>, uint> && std::is_same_v<nth_t<n - 1, P...>, uint>,
                "metal-sim kernel: the parameter list must end with MB_THREAD_POSITION");
}

template <auto Fn, class... P>
inline rt::KernelInfo make_kernel_info(void (*)(P...), const char* name, const char* file) {
  check_thread_params<P...>();
  constexpr int nb = int(sizeof...(P)) - kThreadParams;
  static_assert(nb <= rt::kMaxKernelParams, "metal-sim kernel: too many buffer parameters");
  rt::KernelInfo info{};
  info.name = name;
  info.file = file;
  info.invoke = &invoke<Fn, P...>;
  info.num_params = nb;
  [&]<size_t... I>(std::index_sequence<I...>) {
    ((info.params[I] = param_kind<nth_t<I, P...>>()), ...);
    ((info.elem_bytes[I] = param_elem_bytes<nth_t<I, P...>>()), ...);
    ((info.args_bytes = param_kind<nth_t<I, P...>>() == rt::ParamKind::ConstantArgs
                            ? sizeof(std::remove_cvref_t<nth_t<I, P...>>) : info.args_bytes), ...);
    constexpr int num_args = ((param_kind<nth_t<I, P...>>() == rt::ParamKind::ConstantArgs ? 1 : 0) + ... + 0);
    static_assert(num_args <= 1, "metal-sim kernel: at most one `constant Args&` parameter");
    if constexpr (num_args == 1)
      static_assert(param_kind<nth_t<sizeof...(I) - 1, P...>>() == rt::ParamKind::ConstantArgs,
                    "metal-sim kernel: the `constant Args&` parameter must be the last buffer");
  }(std::make_index_sequence<nb>{});
  return info;
}

struct Registrar {
  explicit Registrar(const rt::KernelInfo& info) { rt::register_kernel(info); }
};

}  // namespace metal_sim
