// numpy <-> Tensor exchange and the argument conventions shared by every binding file.
// Op bindings follow one shape:  ops.NAME(inputs..., *, params..., out=None, device="cpu", reference=False)
// returning the output Tensor (a fresh one unless `out` was given).
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "bindings/dims_caster.h"
#include "core/tensor.h"
#include "ops/exec.h"
#include "ops/sync.h"

namespace mb::py_bind {

namespace py = pybind11;

// Zero-copy view of a numpy array when its dtype maps directly (float32, float16, int32, int64, uint8,
// bool). `dtype` overrides: "bf16" reinterprets a uint16 array, or converts a float array (round to
// nearest even) into a new bf16 tensor; other overrides convert with a copy.
Tensor tensor_from_numpy(const py::array& arr, const std::optional<std::string>& dtype);
// Zero-copy numpy view of a tensor (bf16 appears as uint16); keeps the tensor's memory alive.
py::array tensor_to_numpy(const Tensor& t);
// Accepts a Tensor, or anything numpy turns into an array (zero-copy where possible).
Tensor as_tensor(const py::handle& obj, const char* op, const char* arg);
std::optional<Tensor> as_optional_tensor(const py::object& obj, const char* op, const char* arg);
// The output tensor: `out` when given, else a fresh owning tensor of that dtype and shape.
Tensor out_or_empty(const py::object& out, const char* op, DType dtype, const Shape& shape);
// The Exec for a device name (backend/registry.h: DeviceError if unknown or unavailable here).
Exec make_exec(const std::string& device, bool reference);

// Runs call_ops(ex) — the op calls of one binding — on the device named by `device` / `reference`,
// without the GIL, and commits and waits for the work they encoded, so Python gets finished results.
// The GIL is held again when this returns (or throws).
template <class CallOps>
void run_ops(const std::string& device, bool reference, CallOps&& call_ops) {
  const Exec ex = make_exec(device, reference);
  ops::CommandScope sync(ex);
  py::gil_scoped_release nogil;
  call_ops(ex);
  sync.finish();
}

}  // namespace mb::py_bind
