#include "backend/metal/launcher.h"

#include "backend/metal/launcher_mtl.h"
#include "backend/metal/launcher_sim.h"
#include "core/errors.h"

namespace mb::metal {

#ifndef MARKBASE_HAS_METAL
bool mtl_available(std::string* why) {
  if (why) *why = "this markbase was built without the Metal launcher (it is built only on macOS, with metal-cpp)";
  return false;
}

KernelLauncher& mtl_launcher() {
  std::string why;
  mtl_available(&why);
  throw DeviceError(cat("device 'metal' is not available: ", why));
}
#endif

KernelLauncher& launcher_for(Device d) {
  if (d == Device::MetalSim) {
    if (!metal_sim_built()) throw DeviceError("metal-sim is not built into this markbase (it needs clang 22 or newer at build time)");
    return sim_launcher();
  }
  if (d == Device::Metal) return mtl_launcher();  // DeviceError saying why when Metal is unavailable
  throw DeviceError(cat("device ", device_name(d), " has no Metal kernel launcher"));
}

void synchronize_device(Device d) {
  if (d == Device::MetalSim || d == Device::Metal) launcher_for(d).synchronize();
}

}  // namespace mb::metal
