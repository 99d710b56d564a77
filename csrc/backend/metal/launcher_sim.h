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
//     execution although no earlier dispatch of the command buffer writes it (such inputs are hashed
//     when encoded and checked before their dispatch runs; device-produced inputs are not hashed).
// Every violation is an mb::DeviceError naming the kernel, the buffer index and the byte offset.
#pragma once
#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/metal/launcher.h"
#include "sim/runtime.h"

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
  // A dispatch of the open command buffer: its kernel, and for each read-only binding that no earlier
  // queued dispatch writes (so only the host could change it) the hash of its bytes when encoded.
  struct Queued {
    Dispatch dispatch;
    const metal_sim::rt::KernelInfo* kernel = nullptr;
    std::vector<std::pair<size_t, uint64_t>> host_inputs;  // (buffer index, hash)
  };
  struct WrittenRange {
    const char* data;
    size_t bytes;
  };
  void run(const Queued& q);  // executes one dispatch now, with every runtime check

  mutable std::mutex mu_;
  std::vector<Queued> queue_;           // the open command buffer
  std::vector<WrittenRange> writes_;    // what its dispatches may write
  std::atomic<uint64_t> committed_{0};
};

// The process-wide sim launcher.
SimLauncher& sim_launcher();
// True when the .metal kernels were compiled into this build (MARKBASE_METAL_SIM).
bool metal_sim_built();

}  // namespace mb::metal
