// The interface every Metal-backend dispatch is written against (csrc/backend/metal/*_dispatch.cpp).
// Two implementations: metal-sim (launcher_sim.h, runs the .metal kernels compiled as C++ on the CPU)
// and, on Apple, metal-cpp (launcher_mtl.cpp). A dispatch names a kernel, binds buffers and an argument
// blob, and gives a grid of threadgroups and the threadgroup size (Metal's dispatchThreadgroups).
//
// Command-buffer model (the same for both launchers): dispatch() only encodes into the current command
// buffer; dispatches run in encoding order, each seeing the writes of the ones before it; synchronize()
// commits the command buffer and waits. Until then the host must not read memory a dispatch writes nor
// write memory a dispatch reads. A model forward therefore encodes all its ops and synchronizes once
// (ops never synchronize themselves); the Python op bindings synchronize after each call.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/tensor.h"

namespace mb::metal {

// One buffer argument [[buffer(i)]]: host memory the kernel reads (writable = false) or writes.
// `owner` keeps that memory alive until the command buffer holding the dispatch has completed, so an op
// may bind scratch tensors it drops before the forward synchronizes. Memory recorded in
// core/host_memory.h (heap tensors, arenas, mapped checkpoints) is used in place by the Metal launcher.
struct BufferBinding {
  void* data = nullptr;
  size_t bytes = 0;
  bool writable = false;
  std::shared_ptr<void> owner;

  // A contiguous tensor the kernel only reads / may write (its elements, nothing around them).
  static BufferBinding input(const Tensor& t) { return {t.data(), t.nbytes(), false, t.owner()}; }
  static BufferBinding output(Tensor& t) { return {t.data(), t.nbytes(), true, t.owner()}; }
  // An optional input: an empty binding (0 bytes, which both launchers bind to a placeholder buffer)
  // when absent; the kernel's arguments say it is absent and it is never read.
  static BufferBinding optional_input(const Tensor* t) { return t && t->defined() ? input(*t) : BufferBinding{}; }
};

// A view with any strides (negative ones too) bound as the bytes its elements can touch
// (mb::byte_span), and where its element 0 lies in them; an empty view gets an empty binding.
struct StridedBinding {
  BufferBinding binding;
  int32_t offset = 0;  // elements from the binding's start to t.data()
};
// DeviceError naming `op` and the operand `name` if the span holds more than 2^31 − 1 elements (the
// kernels index it with 32-bit signed offsets).
StridedBinding bind_strided(const Tensor& t, bool writable, const char* op, const char* name);

struct Size3 {
  uint32_t x = 1, y = 1, z = 1;
  uint64_t count() const { return uint64_t(x) * y * z; }
};

struct Dispatch {
  std::string kernel;                  // "<op>_<variant>_<dtype>"
  std::vector<BufferBinding> buffers;  // [[buffer(0)]] ... [[buffer(n-1)]]
  std::vector<unsigned char> args;     // the constant-args blob, [[buffer(n)]]; empty if the kernel has none
  Size3 grid;                          // threadgroups per grid
  Size3 group;                         // threads per threadgroup

  // Copies a POD argument struct from metal/kernel_args.h into the blob.
  template <class A>
  void set_args(const A& a) {
    static_assert(std::is_trivially_copyable_v<A> && std::is_standard_layout_v<A>, "kernel arguments must be POD");
    args.resize(sizeof(A));
    std::memcpy(args.data(), &a, sizeof(A));
  }
};

class KernelLauncher {
 public:
  virtual ~KernelLauncher() = default;
  virtual const char* name() const = 0;  // "metal-sim" or "metal"
  virtual bool has_kernel(const std::string& kernel) const = 0;
  // Largest threadgroup the kernel can be dispatched with (Metal: the pipeline's limit).
  virtual uint32_t max_threads_per_group(const std::string& kernel) const = 0;
  // Encodes one dispatch into the current command buffer. Errors found at encoding (unknown kernel, bad
  // binding, threadgroup too large) are mb::DeviceError thrown here.
  virtual void dispatch(const Dispatch& d) = 0;
  // Commits the current command buffer (if it holds any dispatch) and waits until it has finished.
  // Faults found while running it (the sim's checks, Metal's command-buffer errors) are mb::DeviceError
  // thrown here, naming the kernel; the rest of that command buffer is dropped.
  virtual void synchronize() = 0;
  // Dispatches encoded but not yet committed.
  virtual size_t pending() const = 0;
  // Command buffers committed since the process started (tests count them per forward).
  virtual uint64_t command_buffers_committed() const = 0;
};

// The dtype part of a kernel name: f32, f16, bf16, i32 or i64; InputError naming `op` for any other
// (the front doors only pass dtypes their kernels exist for).
const char* kernel_dtype_suffix(DType t, const char* op);

}  // namespace mb::metal
