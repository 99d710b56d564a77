// Self-registering binding files: each csrc/bindings/*.cpp declares
//   static mb::py_bind::Registrar reg("ops", [](pybind11::module_& m) { ... });
// and the module init runs every registrar, so adding an op touches no shared file.
// Submodule names: "" (markbase._core itself), "ops", "io", ...
#pragma once
#include <pybind11/pybind11.h>

#include <functional>
#include <string>

namespace mb::py_bind {

using BindFn = std::function<void(pybind11::module_&)>;

struct Registrar {
  // `order` sorts registrars (lower first) so types are bound before functions that use them.
  Registrar(const char* submodule, BindFn fn, int order = 100);
};

void run_all(pybind11::module_& root);

}  // namespace mb::py_bind
