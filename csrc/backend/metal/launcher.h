// The interface every Metal-backend dispatch is written against (csrc/backend/metal/*_dispatch.cpp).
// Two implementations: metal-sim (launcher_sim.h, runs the .metal kernels compiled as C++ on the CPU)
// and, on Apple, metal-cpp (not written yet). A dispatch names a kernel, binds buffers and an argument
// blob, and gives a grid of threadgroups and the threadgroup size (Metal's dispatchThreadgroups).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace mb::metal {

// One buffer argument [[buffer(i)]]: host memory the kernel reads (writable = false) or writes.
struct BufferBinding {
  void* data = nullptr;
  size_t bytes = 0;
  bool writable = false;

  // A contiguous tensor the kernel only reads / may write (its elements, nothing around them).
  static BufferBinding input(const Tensor& t) { return {t.data(), t.nbytes(), false}; }
  static BufferBinding output(Tensor& t) { return {t.data(), t.nbytes(), true}; }
};

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
  // Encodes one dispatch; the bound memory must stay valid until synchronize() returns.
  // Errors (unknown kernel, bad binding, a fault detected by the sim) are mb::DeviceError.
  virtual void dispatch(const Dispatch& d) = 0;
  // Waits until every dispatch encoded so far has finished.
  virtual void synchronize() = 0;
};

// The launcher behind a device; DeviceError if that backend is not part of this build.
KernelLauncher& launcher_for(Device d);

}  // namespace mb::metal
