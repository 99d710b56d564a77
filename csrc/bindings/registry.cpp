#include "bindings/registry.h"

#include <algorithm>
#include <map>
#include <vector>

namespace mb::py_bind {

namespace {
struct Entry {
  std::string submodule;
  BindFn fn;
  int order;
};
std::vector<Entry>& entries() {
  static std::vector<Entry> all;
  return all;
}
}  // namespace

Registrar::Registrar(const char* submodule, BindFn fn, int order) {
  entries().push_back({submodule, std::move(fn), order});
}

void run_all(pybind11::module_& root) {
  auto all = entries();
  std::stable_sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) { return a.order < b.order; });
  std::map<std::string, pybind11::module_> subs;
  for (auto& e : all) {
    if (e.submodule.empty()) {
      e.fn(root);
      continue;
    }
    auto it = subs.find(e.submodule);
    if (it == subs.end()) it = subs.emplace(e.submodule, root.def_submodule(e.submodule.c_str())).first;
    e.fn(it->second);
  }
}

}  // namespace mb::py_bind
