#include "backend/metal/sim_registry.h"

#include <map>
#include <mutex>

#include "core/errors.h"

namespace mb::metal::sim {

namespace {
struct Registry {
  std::mutex mu;
  std::map<std::string, metal_sim::rt::KernelInfo> kernels;
  std::vector<std::string> duplicates;  // reported on first use: throwing during static init would abort
};
Registry& registry() {
  static Registry r;
  return r;
}
void check_duplicates(Registry& r) {
  if (r.duplicates.empty()) return;
  std::string names;
  for (const auto& d : r.duplicates) names += (names.empty() ? "" : ", ") + d;
  throw DeviceError(cat("metal-sim: kernel names registered more than once: ", names));
}
}  // namespace

const metal_sim::rt::KernelInfo* find_kernel(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  check_duplicates(r);
  auto it = r.kernels.find(name);
  return it == r.kernels.end() ? nullptr : &it->second;
}

std::vector<std::string> kernel_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  std::vector<std::string> out;
  for (const auto& [name, info] : r.kernels) out.push_back(name);
  return out;
}

}  // namespace mb::metal::sim

void metal_sim::rt::register_kernel(const KernelInfo& info) {
  auto& r = mb::metal::sim::registry();
  std::lock_guard<std::mutex> lk(r.mu);
  if (!r.kernels.emplace(info.name, info).second) r.duplicates.push_back(info.name);
}
