// markbase._core.metal_sim_built() and markbase._core.metal_sim: direct access to the simulator's
// kernel table for its self-tests (tests/metal/) and for debugging a kernel in isolation.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>

#include "backend/metal/launcher_sim.h"
#include "backend/metal/sim_registry.h"
#include "bindings/registry.h"
#include "core/errors.h"

namespace mb::py_bind {
namespace {

namespace py = pybind11;

metal::Size3 size3(const std::vector<uint32_t>& v, const char* what) {
  if (v.empty() || v.size() > 3) throw InputError(cat("run_test_kernel: ", what, " needs 1 to 3 dimensions"));
  metal::Size3 s;
  s.x = v[0];
  if (v.size() > 1) s.y = v[1];
  if (v.size() > 2) s.z = v[2];
  return s;
}

// A Dispatch over numpy arrays; each binding's owner holds a reference to its array (released with the GIL).
metal::Dispatch test_dispatch(const std::string& name, const py::list& buffers, const std::vector<uint32_t>& grid,
                              const std::vector<uint32_t>& group, const py::bytes& args, const std::vector<int>& read_only) {
  if (!metal::metal_sim_built()) throw DeviceError("metal-sim is not built into this markbase");
  metal::Dispatch d;
  d.kernel = name;
  for (size_t i = 0; i < buffers.size(); ++i) {
    py::array a = py::reinterpret_borrow<py::array>(buffers[i]);
    if (!(a.flags() & py::array::c_style)) throw InputError(cat("run_test_kernel: buffer ", i, " must be C-contiguous"));
    bool ro = std::find(read_only.begin(), read_only.end(), int(i)) != read_only.end();
    if (!ro && !a.writeable()) throw InputError(cat("run_test_kernel: buffer ", i, " is not writeable (list it in read_only)"));
    std::shared_ptr<void> owner(new py::object(a), [](void* p) {
      py::gil_scoped_acquire gil;
      delete static_cast<py::object*>(p);
    });
    d.buffers.push_back({const_cast<void*>(a.data()), size_t(a.nbytes()), !ro, std::move(owner)});
  }
  std::string blob = args;
  d.args.assign(blob.begin(), blob.end());
  d.grid = size3(grid, "grid");
  d.group = size3(group, "group");
  return d;
}

void bind_root(py::module_& m) {
  m.def("metal_sim_built", &metal::metal_sim_built,
        "True when this build compiled the Metal kernels for metal-sim (clang 22 or newer was found).");
}

void bind_sim(py::module_& m) {
  m.doc() = "metal-sim: the Metal kernels compiled as C++ and run on the CPU (self-tests and debugging).";
  m.def("kernels", [] { return metal::sim::kernel_names(); }, "Names of every kernel compiled into the simulator.");
  m.def("command_buffers_committed", [] { return metal::sim_launcher().command_buffers_committed(); },
        "Command buffers the sim launcher has committed since the process started.");
  m.def("pending", [] { return metal::sim_launcher().pending(); },
        "Dispatches encoded into the open command buffer and not yet committed.");
  m.def(
      "run_test_kernel",
      [](const std::string& name, const py::list& buffers, const std::vector<uint32_t>& grid,
         const std::vector<uint32_t>& group, const py::bytes& args, const std::vector<int>& read_only) {
        metal::Dispatch d = test_dispatch(name, buffers, grid, group, args, read_only);
        py::gil_scoped_release nogil;
        metal::sim_launcher().dispatch(d);
        metal::sim_launcher().synchronize();  // faults found while running surface here
      },
      py::arg("name"), py::arg("buffers"), py::arg("grid"), py::arg("group"), py::arg("args") = py::bytes(),
      py::arg("read_only") = std::vector<int>{},
      "Dispatches kernel `name` and waits for it: buffers[i] (C-contiguous numpy arrays) is [[buffer(i)]], "
      "writable unless i is in read_only; `args` is the constant-argument blob; grid = threadgroups per grid, "
      "group = threads per threadgroup. Faults raise markbase.DeviceError.");
  m.def(
      "encode_test_kernel",
      [](const std::string& name, const py::list& buffers, const std::vector<uint32_t>& grid,
         const std::vector<uint32_t>& group, const py::bytes& args, const std::vector<int>& read_only) {
        metal::Dispatch d = test_dispatch(name, buffers, grid, group, args, read_only);
        py::gil_scoped_release nogil;
        metal::sim_launcher().dispatch(d);
      },
      py::arg("name"), py::arg("buffers"), py::arg("grid"), py::arg("group"), py::arg("args") = py::bytes(),
      py::arg("read_only") = std::vector<int>{},
      "As run_test_kernel, but only encodes into the open command buffer (the arrays are kept alive until "
      "it completes); synchronize() runs it.");
  m.def("synchronize", [] {
    py::gil_scoped_release nogil;
    metal::sim_launcher().synchronize();
  }, "Commits the sim's open command buffer and waits; faults raise markbase.DeviceError.");
}

Registrar reg_root("", bind_root);
Registrar reg_sim("metal_sim", bind_sim);

}  // namespace
}  // namespace mb::py_bind
