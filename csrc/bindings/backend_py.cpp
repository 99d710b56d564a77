// markbase._core: devices (the backend registry, backend/registry.h).
#include "backend/registry.h"
#include "bindings/registry.h"
#include "bindings/tensor_py.h"

namespace mb::py_bind {

Exec make_exec(const std::string& device, bool reference) { return Exec{&backend_for(device), reference}; }

namespace {

void bind_backend(py::module_& m) {
  m.def("devices", [] { return devices(); },
        "Backends this build can run here (metal needs a Metal GPU), in order of preference.");
  m.def("check_device", [](const std::string& name) { backend_for(name); },
        "Raises DeviceError saying why `name` cannot run here (unknown, not built, or no Metal GPU).");
}

Registrar reg_backend("", bind_backend, /*order=*/10);

}  // namespace
}  // namespace mb::py_bind
