// metal-sim launcher: runs .metal kernels compiled as C++ (metal/sim/) on the CPU with MSL semantics.
// Threadgroups run in parallel on the thread pool; the threads of one group run as fibers on one OS
// thread (sim_group.h). Dispatches are queued and run at synchronize(), in order (one command buffer).
// Binding checks happen when a dispatch is encoded; on top of running the kernel it checks:
//   - the bindings match the kernel's parameters (count, argument-blob size);
//   - a writable buffer does not partially overlap another binding (identical ranges = in place);
//   - every device-pointer access is inside its buffer and aligned (device_ptr in metal/sim/);
//   - a kernel writing a buffer bound read-only: such a parameter (declared writable by the kernel)
//     gets a private copy, compared after the dispatch; the caller's memory is never modified;
//   - the host breaking the command-buffer rule: an input whose bytes changed between encoding and
//     execution although no earlier dispatch of the command buffer wrote it (each input is hashed
//     when encoded and checked before its dispatch runs).
// Every violation is an mb::DeviceError naming the kernel, the buffer index and the byte offset.
#pragma once
#include <atomic>
#include <mutex>
#include <vector>

#include "backend/metal/launcher.h"

namespace mb::metal {

class SimLauncher final : public KernelLauncher {
 public:
  const char* name() const override { return "metal-sim"; }
  bool has_kernel(const std::string& kernel) const override;
  uint32_t max_threads_per_group(const std::string& kernel) const override;
  void dispatch(const Dispatch& d) override;
  void synchronize() override;
  size_t pending() const override;
  uint64_t command_buffers_committed() const override { return committed_.load(); }

 private:
  // A dispatch of the open command buffer and the hash of each read-only binding when it was encoded.
  struct Queued {
    Dispatch dispatch;
    std::vector<uint64_t> input_hash;
  };
  void run(const Dispatch& d);  // executes one dispatch now, with every runtime check

  mutable std::mutex mu_;
  std::vector<Queued> queue_;  // the open command buffer
  std::atomic<uint64_t> committed_{0};
};

// The process-wide sim launcher.
SimLauncher& sim_launcher();
// True when the .metal kernels were compiled into this build (MARKBASE_METAL_SIM).
bool metal_sim_built();

}  // namespace mb::metal
