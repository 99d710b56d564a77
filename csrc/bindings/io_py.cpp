// markbase._core.io: memory-mapped safetensors files and checkpoint directories.
// Python-facing wrappers (mapping protocol, KeyError for missing names) live in python/markbase/io.py.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "core/errors.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

namespace mb::py_bind {
namespace {

using io::Checkpoint;
using io::SafetensorsFile;
using io::TensorInfo;

// Little-endian numpy dtype holding the file's bytes: bf16 as uint16, F8 formats as uint8.
py::dtype numpy_dtype_for(const std::string& st) {
  if (st == "F64") return py::dtype("<f8");
  if (st == "F32") return py::dtype("<f4");
  if (st == "F16") return py::dtype("<f2");
  if (st == "BF16") return py::dtype("<u2");
  if (st == "I64") return py::dtype("<i8");
  if (st == "I32") return py::dtype("<i4");
  if (st == "I16") return py::dtype("<i2");
  if (st == "I8") return py::dtype("i1");
  if (st == "U32") return py::dtype("<u4");
  if (st == "U8" || st == "F8_E4M3" || st == "F8_E5M2") return py::dtype("u1");
  if (st == "BOOL") return py::dtype("?");
  throw CheckpointError(cat("safetensors dtype ", st, " has no numpy view"));  // unreachable: validated on open
}

// Read-only zero-copy numpy view of a tensor's bytes; the capsule keeps the file mapped.
py::array info_to_numpy(const TensorInfo& ti, std::shared_ptr<const SafetensorsFile> file) {
  std::vector<ssize_t> shape(ti.shape.begin(), ti.shape.end());
  const Dims el_strides = contiguous_strides(ti.shape);
  std::vector<ssize_t> strides(el_strides.size());
  for (size_t i = 0; i < strides.size(); ++i) strides[i] = ssize_t(el_strides[i]) * ssize_t(ti.itemsize);
  auto* keep = new std::shared_ptr<const SafetensorsFile>(std::move(file));
  py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<const SafetensorsFile>*>(p); });
  py::array a(numpy_dtype_for(ti.dtype), shape, strides, ti.data, base);
  // The mapping is PROT_READ: numpy must never write to it.
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

py::tuple shape_tuple(const TensorInfo& ti) { return py::tuple(py::cast(ti.shape)); }

std::shared_ptr<SafetensorsFile> file_ptr(const Checkpoint& c, const std::string& name) {
  const SafetensorsFile* f = &c.file_for(name);
  for (const auto& p : c.files())
    if (p.get() == f) return p;
  throw CheckpointError("checkpoint: internal error locating the file of a tensor");
}

void bind_io(py::module_& m) {
  // The largest safetensors header and model.safetensors.index.json markbase reads (validate.py reads the index too).
  m.attr("MAX_INDEX_BYTES") = io::kMaxHeaderBytes;
  py::class_<SafetensorsFile, std::shared_ptr<SafetensorsFile>>(
      m, "SafetensorsFile", "A validated, read-only memory-mapped safetensors file (use markbase.io.SafetensorsFile).")
      .def(py::init([](const std::string& path) {
             std::shared_ptr<SafetensorsFile> f;
             {
               py::gil_scoped_release nogil;
               f = SafetensorsFile::open(path);
             }
             return f;
           }),
           py::arg("path"))
      .def_property_readonly("path", &SafetensorsFile::path)
      .def("keys", &SafetensorsFile::keys, "Tensor names sorted by data offset (file order).")
      .def("contains", &SafetensorsFile::contains, py::arg("name"))
      .def("__len__", &SafetensorsFile::size)
      .def("dtype", [](const SafetensorsFile& f, const std::string& n) { return f.info(n).dtype; }, py::arg("name"))
      .def("shape", [](const SafetensorsFile& f, const std::string& n) { return shape_tuple(f.info(n)); }, py::arg("name"))
      .def("offsets", [](const SafetensorsFile& f, const std::string& n) {
             const TensorInfo& ti = f.info(n);
             return py::make_tuple(ti.begin, ti.end);
           }, py::arg("name"), "[begin, end) byte range relative to the data section.")
      .def_property_readonly("metadata", &SafetensorsFile::metadata)
      .def_property_readonly("data_start", &SafetensorsFile::data_start)
      .def("array", [](const std::shared_ptr<SafetensorsFile>& f, const std::string& n) { return info_to_numpy(f->info(n), f); },
           py::arg("name"))
      .def("tensor", &SafetensorsFile::tensor, py::arg("name"))
      .def("_mapping_range", [](const SafetensorsFile& f) {
             return py::make_tuple(reinterpret_cast<uintptr_t>(f.mapping()), f.mapping_size());
           }, "(address, size) of the whole mapping, for bounds tests.");

  py::class_<Checkpoint>(m, "Checkpoint", "Tensors of a checkpoint directory (use markbase.io.open_checkpoint).")
      .def_static("open", [](const std::string& dir) {
             py::gil_scoped_release nogil;
             return Checkpoint::open(dir);
           }, py::arg("dir"))
      .def_property_readonly("dir", &Checkpoint::dir)
      .def("keys", &Checkpoint::keys)
      .def("contains", &Checkpoint::contains, py::arg("name"))
      .def("__len__", &Checkpoint::size)
      .def("dtype", [](const Checkpoint& c, const std::string& n) { return c.info(n).dtype; }, py::arg("name"))
      .def("shape", [](const Checkpoint& c, const std::string& n) { return shape_tuple(c.info(n)); }, py::arg("name"))
      .def("offsets", [](const Checkpoint& c, const std::string& n) {
             const TensorInfo& ti = c.info(n);
             return py::make_tuple(ti.begin, ti.end);
           }, py::arg("name"))
      .def("array", [](const Checkpoint& c, const std::string& n) { return info_to_numpy(c.info(n), file_ptr(c, n)); },
           py::arg("name"))
      .def("tensor", &Checkpoint::tensor, py::arg("name"))
      .def("file_for", [](const Checkpoint& c, const std::string& n) { return c.file_for(n).path(); }, py::arg("name"),
           "Path of the file holding the tensor.")
      .def("file", &file_ptr, py::arg("name"), "The SafetensorsFile holding the tensor.")
      .def("files", [](const Checkpoint& c) {
        std::vector<std::string> paths;
        for (const auto& f : c.files()) paths.push_back(f->path());
        return paths;
      });
}

Registrar reg_io("io", bind_io);

}  // namespace
}  // namespace mb::py_bind
