// metal-sim kernel table: every kernel compiled from metal/*.metal registers itself at load time
// (MB_REGISTER_KERNEL); the launcher looks kernels up by name.
#pragma once
#include <string>
#include <vector>

#include "sim/runtime.h"

namespace mb::metal::sim {

// nullptr if no kernel has that name. Throws DeviceError if two kernels registered the same name.
const metal_sim::rt::KernelInfo* find_kernel(const std::string& name);
std::vector<std::string> kernel_names();

}  // namespace mb::metal::sim
