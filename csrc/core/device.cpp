#include "core/device.h"

#include "core/errors.h"

namespace mb::metal {
// backend/metal/launcher_mtl.h (declared here to keep core free of backend headers)
bool mtl_available(std::string* why);
}

namespace mb {

const char* device_name(Device d) {
  switch (d) {
    case Device::CPU: return "cpu";
    case Device::MetalSim: return "metal-sim";
    case Device::Metal: return "metal";
  }
  return "?";
}

std::vector<std::string> built_devices() {
  std::vector<std::string> out;
#ifdef MARKBASE_HAS_METAL
  // Built is not enough: a Mac without a usable GPU (some CI VMs) cannot run it.
  if (metal::mtl_available(nullptr)) out.push_back("metal");
#endif
  out.push_back("cpu");
#ifdef MARKBASE_HAS_METAL_SIM
  // Every op has a Metal kernel, so the simulator is a complete backend (slower than cpu: last).
  out.push_back("metal-sim");
#endif
  return out;
}

Device device_from_name(std::string_view name) {
  Device d;
  if (name == "cpu") d = Device::CPU;
  else if (name == "metal-sim") d = Device::MetalSim;
  else if (name == "metal") d = Device::Metal;
  else throw DeviceError(cat("unknown device '", name, "' (expected cpu, metal or metal-sim)"));
  if (d == Device::Metal) {
    std::string why;
    if (!metal::mtl_available(&why)) throw DeviceError(cat("device 'metal' is not available: ", why));
    return d;
  }
  for (const auto& b : built_devices())
    if (b == name) return d;
  throw DeviceError(cat("device '", name, "' is not built into this markbase (built: cpu",
#ifdef MARKBASE_HAS_METAL_SIM
                        ", metal-sim",
#endif
                        "); metal-sim needs clang 22 or newer at build time"));
}

}  // namespace mb
