// markbase._core: errors, Tensor, arena and thread pool.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "backend/cpu/isa_probe.h"
#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "core/arena.h"
#include "core/errors.h"
#include "core/host_memory.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "runtime/op_profile.h"

namespace mb::py_bind {

namespace {

std::optional<DType> numpy_dtype(const py::dtype& dt) {
  char kind = dt.kind();
  ssize_t size = dt.itemsize();
  if (kind == 'f' && size == 4) return DType::F32;
  if (kind == 'f' && size == 2) return DType::F16;
  if (kind == 'i' && size == 4) return DType::I32;
  if (kind == 'i' && size == 8) return DType::I64;
  if (kind == 'u' && size == 1) return DType::U8;
  if (kind == 'b' && size == 1) return DType::BOOL;
  return std::nullopt;
}

py::dtype numpy_dtype_of(DType t) {
  switch (t) {
    case DType::F32: return py::dtype::of<float>();
    case DType::F16: return py::dtype("float16");
    case DType::BF16: return py::dtype::of<uint16_t>();
    case DType::I32: return py::dtype::of<int32_t>();
    case DType::I64: return py::dtype::of<int64_t>();
    case DType::U8: return py::dtype::of<uint8_t>();
    case DType::BOOL: return py::dtype::of<bool>();
    default: throw InputError(cat("tensors of dtype ", dtype_name(t), " have no numpy view"));
  }
}

// Wraps a numpy array without copying; the array object is the owner.
Tensor wrap_array(const py::array& arr, DType dt) {
  if (size_t(arr.ndim()) > Dims::kMaxDims)
    throw InputError(cat("a numpy array of ", arr.ndim(), " dimensions: markbase tensors have at most ", Dims::kMaxDims));
  Shape shape(arr.shape(), arr.shape() + arr.ndim());
  std::vector<int64_t> strides(size_t(arr.ndim()));
  ssize_t item = arr.itemsize();
  for (ssize_t i = 0; i < arr.ndim(); ++i) {
    if (arr.strides()[i] % item) throw InputError("numpy array strides are not a multiple of its item size");
    strides[size_t(i)] = arr.strides()[i] / item;
  }
  // Keep the array alive while C++ holds the view; releasing needs the GIL.
  auto* ref = new py::object(arr);
  std::shared_ptr<void> owner(ref, [](void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<py::object*>(p);
  });
  bool writable = arr.writeable();
  return Tensor::wrap(const_cast<void*>(arr.data()), dt, shape, std::move(strides), std::move(owner),
                      StorageKind::External, writable);
}

}  // namespace

Tensor tensor_from_numpy(const py::array& arr_in, const std::optional<std::string>& dtype) {
  // Non-native byte order (e.g. '>f4') cannot be viewed in place: convert to native order first.
  py::array arr = arr_in;
  char order = arr.dtype().byteorder();
  if (order != '=' && order != '|')
    arr = py::array::ensure(arr.attr("astype")(arr.dtype().attr("newbyteorder")("=")));
  std::optional<DType> native = numpy_dtype(arr.dtype());
  if (!dtype) {
    if (!native) throw InputError(cat("numpy dtype ", std::string(py::str(arr.dtype())), " has no markbase equivalent"));
    return wrap_array(arr, *native);
  }
  DType want = dtype_from_name(*dtype);
  if (native && *native == want) return wrap_array(arr, want);
  if (want == DType::BF16 && arr.dtype().kind() == 'u' && arr.itemsize() == 2) return wrap_array(arr, DType::BF16);
  // Conversion with a copy: go through float32 (or the integer type) with numpy, then convert in C++.
  if (dtype_is_float(want)) {
    py::array_t<float, py::array::c_style | py::array::forcecast> f32(arr);
    Tensor src = wrap_array(f32, DType::F32);
    return src.to(want);
  }
  py::array conv = py::array::ensure(arr.attr("astype")(numpy_dtype_of(want)), py::array::c_style);
  return wrap_array(conv, want).clone();
}

py::array tensor_to_numpy(const Tensor& t) {
  std::vector<ssize_t> shape(t.shape().begin(), t.shape().end());
  std::vector<ssize_t> strides(t.strides().size());
  ssize_t item = ssize_t(dtype_itemsize(t.dtype()));
  for (size_t i = 0; i < strides.size(); ++i) strides[i] = ssize_t(t.strides()[i]) * item;
  // The capsule holds a copy of the tensor (and so its storage owner).
  auto* keep = new Tensor(t);
  py::capsule base(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  py::array a(numpy_dtype_of(t.dtype()), shape, strides, t.data(), base);
  if (!t.writable()) py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

Tensor as_tensor(const py::handle& obj, const char* op, const char* arg) {
  if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
  py::array arr;
  try {
    arr = py::array::ensure(obj);
  } catch (...) {
  }
  if (!arr) throw InputError(cat(op, ": argument '", arg, "' must be a Tensor or a numpy array"));
  if (arr.dtype().kind() == 'f' && arr.itemsize() == 8)
    throw InputError(cat(op, ": argument '", arg, "' is float64; pass float32 (or a Tensor of f32/bf16/f16)"));
  if (arr.dtype().kind() == 'O') throw InputError(cat(op, ": argument '", arg, "' is not numeric"));
  return tensor_from_numpy(arr, std::nullopt);
}

std::optional<Tensor> as_optional_tensor(const py::object& obj, const char* op, const char* arg) {
  if (obj.is_none()) return std::nullopt;
  return as_tensor(obj, op, arg);
}

Tensor out_or_empty(const py::object& out, const char* op, DType dtype, const Shape& shape) {
  if (out.is_none()) return Tensor::empty(dtype, shape);
  return as_tensor(out, op, "out");
}

namespace {

void bind_core(py::module_& m) {
  // Error hierarchy: markbase.MarkbaseError and its subclasses.
  static py::exception<MarkbaseError> base(m, "MarkbaseError", PyExc_RuntimeError);
  static py::exception<CheckpointError> ckpt(m, "CheckpointError", base.ptr());
  static py::exception<ConfigError> config(m, "ConfigError", base.ptr());
  static py::exception<InputError> input(m, "InputError", base.ptr());
  static py::exception<DeviceError> device(m, "DeviceError", base.ptr());
  static py::exception<NumericsError> numerics(m, "NumericsError", base.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const CheckpointError& e) {
      py::set_error(ckpt, e.what());
    } catch (const ConfigError& e) {
      py::set_error(config, e.what());
    } catch (const InputError& e) {
      py::set_error(input, e.what());
    } catch (const DeviceError& e) {
      py::set_error(device, e.what());
    } catch (const NumericsError& e) {
      py::set_error(numerics, e.what());
    } catch (const MarkbaseError& e) {
      py::set_error(base, e.what());
    }
  });

  m.attr("__version__") = MARKBASE_VERSION;
  m.def("num_threads", [] { return ThreadPool::global().num_threads(); },
        "Worker threads of the CPU pool (MARKBASE_NUM_THREADS, default: all cores).");

  py::class_<Tensor>(m, "Tensor", py::buffer_protocol(),
                     "A typed, strided view of memory (owned, arena, memory-mapped or borrowed from numpy).")
      .def(py::init([](const py::array& arr, std::optional<std::string> dtype) { return tensor_from_numpy(arr, dtype); }),
           py::arg("array"), py::arg("dtype") = py::none())
      .def_static("from_numpy", &tensor_from_numpy, py::arg("array"), py::arg("dtype") = py::none(),
                  "Zero-copy where the dtype maps directly; dtype='bf16' reinterprets uint16 or converts floats.")
      .def_static("empty", [](const Shape& shape, const std::string& dtype) { return Tensor::empty(dtype_from_name(dtype), shape); },
                  py::arg("shape"), py::arg("dtype") = "f32")
      .def_static("zeros", [](const Shape& shape, const std::string& dtype) { return Tensor::zeros(dtype_from_name(dtype), shape); },
                  py::arg("shape"), py::arg("dtype") = "f32")
      .def_property_readonly("dtype", [](const Tensor& t) { return std::string(dtype_name(t.dtype())); })
      .def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); })
      .def_property_readonly("strides", [](const Tensor& t) { return py::tuple(py::cast(t.strides())); })
      .def_property_readonly("offset", &Tensor::offset)
      .def_property_readonly("ndim", &Tensor::dim)
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def_property_readonly("writable", &Tensor::writable)
      .def_property_readonly("kind", [](const Tensor& t) {
        switch (t.kind()) {
          case StorageKind::Owned: return "owned";
          case StorageKind::Arena: return "arena";
          case StorageKind::Mapped: return "mapped";
          default: return "external";
        }
      })
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("numpy", &tensor_to_numpy, "Zero-copy numpy view (bf16 as uint16).")
      .def("to_float32", [](const Tensor& t) { return tensor_to_numpy(t.dtype() == DType::F32 ? t.clone() : t.to(DType::F32)); },
           "A float32 numpy copy (converting bf16 / f16).")
      .def("to", [](const Tensor& t, const std::string& dt) { return t.to(dtype_from_name(dt)); }, py::arg("dtype"))
      .def("contiguous", &Tensor::contiguous)
      .def("clone", &Tensor::clone)
      .def("reshape", &Tensor::reshape, py::arg("shape"))
      .def("slice", &Tensor::slice, py::arg("dim"), py::arg("start"), py::arg("stop"))
      .def("select", &Tensor::select, py::arg("dim"), py::arg("index"))
      .def("transpose", &Tensor::transpose, py::arg("dim0"), py::arg("dim1"))
      .def("permute", &Tensor::permute, py::arg("order"))
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()); })
      .def("__len__", [](const Tensor& t) {
        if (t.dim() == 0) throw InputError("len() of a 0-d tensor");
        return t.size(0);
      })
      .def("__repr__", [](const Tensor& t) { return "markbase.Tensor(" + t.describe() + ")"; })
      .def_buffer([](Tensor& t) -> py::buffer_info {
        std::vector<ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
        ssize_t item = ssize_t(dtype_itemsize(t.dtype()));
        for (int64_t s : t.strides()) strides.push_back(ssize_t(s) * item);
        std::string fmt;
        switch (t.dtype()) {
          case DType::F32: fmt = py::format_descriptor<float>::format(); break;
          case DType::F16: fmt = "e"; break;
          case DType::BF16: fmt = py::format_descriptor<uint16_t>::format(); break;
          case DType::I32: fmt = py::format_descriptor<int32_t>::format(); break;
          case DType::I64: fmt = py::format_descriptor<int64_t>::format(); break;
          case DType::U8: fmt = py::format_descriptor<uint8_t>::format(); break;
          case DType::BOOL: fmt = py::format_descriptor<bool>::format(); break;
          default: throw InputError(cat("tensors of dtype ", dtype_name(t.dtype()), " have no buffer view"));
        }
        return py::buffer_info(t.data(), item, fmt, t.dim(), shape, strides, !t.writable());
      });

  py::class_<Arena>(m, "Arena", "Bump allocator for activations (64-byte aligned).")
      .def(py::init<size_t>(), py::arg("capacity_bytes"))
      .def("tensor", [](Arena& a, const Shape& shape, const std::string& dt) { return a.tensor(dtype_from_name(dt), shape); },
           py::arg("shape"), py::arg("dtype") = "f32", py::keep_alive<0, 1>())
      .def("mark", &Arena::mark)
      .def("reset", &Arena::reset, py::arg("mark") = 0)
      .def_property_readonly("used", &Arena::used)
      .def_property_readonly("capacity", &Arena::capacity)
      .def_property_readonly("high_water", &Arena::high_water);

  m.def("_set_huge_pages", [](int mode) { set_huge_pages(mode); }, py::arg("mode"),
        "Whether host allocations of 4 MiB or more ask for transparent huge pages from now on: 0 no, 1 yes, "
        "-1 as MARKBASE_HUGEPAGES says (core/host_memory.h). For tests and A/B runs.");
  m.def("_huge_pages", [] { return huge_pages_enabled(); }, "Whether large host allocations ask for huge pages.");
  m.def("_op_profile_start", &runtime::op_profile_start,
        "Starts a process-wide op profile (CPU backend: wall time between consecutive ops, by op and output shape).");
  m.def("_op_profile_stop", [] {
    py::list out;
    for (const auto& e : runtime::op_profile_stop()) out.append(py::make_tuple(e.key, e.count, e.seconds));
    return out;
  }, "Stops the profile: [(op and output shape, count, seconds)], most time first.");

  m.def("_isa_rates", [](double seconds) {
    std::vector<cpu::IsaRate> rates;
    {
      py::gil_scoped_release nogil;
      rates = cpu::measure_isa_rates(seconds);
    }
    std::vector<std::pair<std::string, double>> out;
    for (const auto& r : rates) out.emplace_back(r.instruction, r.gmacs);
    return out;
  }, py::arg("seconds") = 0.5,
     "Benchmark hook (bench/isa_probe.py): [(instruction, GMAC/s on this thread)], 0 where the CPU lacks it.");

  m.def("_memory_read_gbps", [](size_t nbytes, int repeats) {
    // Benchmark hook: main-memory read bandwidth through the pool (every thread sums its own slice),
    // the roofline of a memory-bound decode. Best of `repeats`, GB/s of bytes read.
    nbytes = std::max<size_t>(nbytes / 4096 * 4096, 4096);
    Tensor buf = Tensor::empty(DType::U8, {int64_t(nbytes)});
    std::memset(buf.data(), 1, nbytes);  // fault the pages in before timing
    const uint64_t* words = buf.data_as<const uint64_t>();
    const int64_t n = int64_t(nbytes / 8);
    double best = 0.0;
    std::atomic<uint64_t> sink{0};
    py::gil_scoped_release nogil;
    for (int r = 0; r < std::max(repeats, 1); ++r) {
      auto t0 = std::chrono::steady_clock::now();
      parallel_for(n, n / std::max(1, ThreadPool::global().num_threads()), [&](int64_t b, int64_t e) {
        // Eight streams per thread read in lockstep, as the decode GEMV reads its weight rows: one
        // sequential stream per core stays well below what the memory delivers (~15 vs ~20 GB/s a core here).
        constexpr int kStreams = 8;
        const int64_t len = (e - b) / kStreams;
        uint64_t acc[kStreams] = {};
        for (int64_t i = 0; i < len; ++i)
          for (int s = 0; s < kStreams; ++s) acc[s] += words[b + s * len + i];
        for (int64_t i = b + kStreams * len; i < e; ++i) acc[0] += words[i];
        uint64_t total = 0;
        for (uint64_t a : acc) total += a;
        sink += total;
      });
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, double(nbytes) / s / 1e9);
    }
    return best;
  }, py::arg("nbytes") = size_t(1) << 30, py::arg("repeats") = 3);

  m.def("_parallel_thread_ids", [](int64_t n, int64_t grain) {
    // Test hook: which pool thread ran each item (proves work spreads over the pool).
    std::vector<int64_t> ids(size_t(n), -1);
    std::vector<std::thread::id> seen;
    std::mutex mu;
    {
      py::gil_scoped_release nogil;
      parallel_for(n, grain, [&](int64_t b, int64_t e) {
        auto me = std::this_thread::get_id();
        int64_t slot;
        {
          std::lock_guard<std::mutex> lk(mu);
          auto it = std::find(seen.begin(), seen.end(), me);
          slot = it - seen.begin();
          if (it == seen.end()) seen.push_back(me);
        }
        for (int64_t i = b; i < e; ++i) ids[size_t(i)] = slot;
        // Give the other workers time to pick up chunks.
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      });
    }
    return ids;
  }, py::arg("n"), py::arg("grain") = 1);
}

Registrar reg_core("", bind_core, /*order=*/0);

}  // namespace
}  // namespace mb::py_bind

PYBIND11_MODULE(_core, m) {
  m.doc() = "markbase native core";
  mb::py_bind::run_all(m);
}
