#include "backend/metal/launcher.h"

#include <limits>

#include "backend/metal/launcher_mtl.h"
#include "core/errors.h"

namespace mb::metal {

StridedBinding bind_strided(const Tensor& t, bool writable, const char* op, const char* name) {
  StridedBinding s;
  if (t.numel() == 0) return s;  // nothing is touched
  const char *lo, *hi;
  byte_span(t, &lo, &hi);
  const int64_t item = int64_t(dtype_itemsize(t.dtype()));
  const int64_t elems = (hi - lo) / item;
  if (elems > int64_t(std::numeric_limits<int32_t>::max()))
    throw DeviceError(cat(op, ": ", name, " ", t.describe(), " spans ", elems,
                          " elements, beyond the Metal kernels' 32-bit offsets"));
  s.binding = {const_cast<char*>(lo), size_t(hi - lo), writable, t.owner()};
  s.offset = int32_t((static_cast<const char*>(t.data()) - lo) / item);
  return s;
}

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

HostAllocFn mtl_host_allocator() { return nullptr; }
#endif

const char* kernel_dtype_suffix(DType t, const char* op) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    default: throw InputError(cat("internal: no ", op, " Metal kernel for dtype ", dtype_name(t)));
  }
}

}  // namespace mb::metal
