// The backend registry: every backend registers itself at load time with a static registrar in its own
// folder, e.g.
//   static const MyBackend instance;
//   static const mb::BackendRegistrar reg(instance, /*preference=*/5);
// Device names, devices() and the errors for unknown or unavailable devices all come from here; a
// backend is looked up once per device name (ops/exec.h: Exec holds the result).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"

namespace mb {

struct BackendRegistrar {
  // `preference`: devices() lists lower first (metal 0, cpu 10, metal-sim 20). `listed` = false: runs
  // when named but devices() does not offer it (test backends). Installs backend.host_allocator().
  BackendRegistrar(const Backend& backend, int preference, bool listed = true);
};

// The listed backends that can run here, in preference order.
std::vector<std::string> devices();

// The backend registered as `device`. DeviceError if no backend has that name (naming the known ones),
// or if it cannot run here (saying why).
const Backend& backend_for(std::string_view device);

// The CPU backend (backend/cpu): the default device.
const Backend& default_backend();
// The CPU's scalar reference kernels (backend/cpu), which every reference run uses whatever the device.
// Not a device of its own.
const Backend& reference_backend();

}  // namespace mb
