// Devices (backends) and the execution choice every op front door receives.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace mb {

enum class Device : unsigned char { CPU, MetalSim, Metal };

struct Exec {
  Device device = Device::CPU;
  // Run the scalar reference kernel instead of the fast one (parity tests, debugging).
  bool reference = false;
};

const char* device_name(Device d);
// Parses "cpu", "metal-sim", "metal"; throws DeviceError if the name is unknown or not built in.
Device device_from_name(std::string_view name);
// The backends this build can run here (compiled in; for metal, a Metal GPU present), in preference order.
std::vector<std::string> built_devices();

}  // namespace mb
