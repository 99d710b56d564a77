// The metal-cpp launcher (Apple GPUs). Built only on macOS with MARKBASE_METAL (CMakeLists.txt); its
// sources live in csrc/backend/metal/apple/. Elsewhere mtl_launcher() throws DeviceError saying why.
#pragma once
#include <string>

#include "backend/metal/launcher.h"
#include "core/host_memory.h"

namespace mb::metal {

// The process-wide Metal launcher on the system default device; DeviceError (with the reason) when this
// build has no Metal launcher or the machine has no Metal device.
KernelLauncher& mtl_launcher();

// True when device="metal" can run here; otherwise false with the reason in *why.
bool mtl_available(std::string* why);

// The host allocator the metal backend installs (core/host_memory.h): page-aligned VM allocations, each
// recorded, which the launcher wraps as no-copy buffers. nullptr in builds without the launcher.
HostAllocFn mtl_host_allocator();

}  // namespace mb::metal
