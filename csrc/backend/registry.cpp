#include "backend/registry.h"

#include <algorithm>
#include <mutex>

#include "core/errors.h"

namespace mb {

namespace {

struct Entry {
  const Backend* backend;
  int preference;
  bool listed;
};

struct Registry {
  std::mutex mu;
  std::vector<Entry> entries;        // sorted by preference (stable: ties keep registration order)
  std::vector<std::string> errors;   // reported on first use: throwing during static init would abort
};

Registry& registry() {
  static Registry r;
  return r;
}

void check_errors(const Registry& r) {
  if (r.errors.empty()) return;
  std::string all;
  for (const auto& e : r.errors) all += (all.empty() ? "" : "; ") + e;
  throw DeviceError(cat("backend registry: ", all));
}

}  // namespace

BackendRegistrar::BackendRegistrar(const Backend& backend, int preference, bool listed) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  const std::string name = backend.name();
  for (const Entry& e : r.entries)
    if (name == e.backend->name()) r.errors.push_back(cat("device '", name, "' registered twice"));
  if (HostAllocFn fn = backend.host_allocator(); fn && !install_host_allocator(fn))
    r.errors.push_back(cat("device '", name, "' needs its own host allocator but another backend installed one"));
  auto at = std::upper_bound(r.entries.begin(), r.entries.end(), preference,
                             [](int p, const Entry& e) { return p < e.preference; });
  r.entries.insert(at, Entry{&backend, preference, listed});
}

std::vector<std::string> devices() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  check_errors(r);
  std::vector<std::string> out;
  for (const Entry& e : r.entries)
    if (e.listed && e.backend->available(nullptr)) out.push_back(e.backend->name());
  return out;
}

const Backend& backend_for(std::string_view device) {
  Registry& r = registry();
  const Backend* found = nullptr;
  std::string known;
  {
    std::lock_guard<std::mutex> lk(r.mu);
    check_errors(r);
    std::vector<std::string> names;
    for (const Entry& e : r.entries) {
      if (device == e.backend->name()) found = e.backend;
      if (e.listed) names.push_back(e.backend->name());
    }
    for (size_t i = 0; i < names.size(); ++i) known += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  if (!found) throw DeviceError(cat("unknown device '", device, "' (expected ", known, ")"));
  std::string why;
  if (!found->available(&why)) {
    std::string here;
    for (const auto& d : devices()) here += (here.empty() ? "" : ", ") + d;
    throw DeviceError(cat("device '", device, "' is not available: ", why, "; devices that run here: ", here));
  }
  return *found;
}

}  // namespace mb
