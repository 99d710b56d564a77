// The metal-cpp launcher: runs the .metal kernels on the system's Apple GPU (launcher.h documents the
// command-buffer model it implements). Built only on macOS with MARKBASE_METAL (CMakeLists.txt).
//   - Kernels: the embedded MSL bundle (kernel_bundle.h), compiled once at first use with fast math
//     off; one compute pipeline per kernel, created on first dispatch and cached.
//   - Memory: a binding inside a recorded host region (core/host_memory.h) is used in place through a
//     shared-storage no-copy buffer wrapping the whole region (or a page-aligned window of it when the
//     region exceeds the device's maxBufferLength); anything else is staged through a shared buffer,
//     copied in when encoded and, if writable, copied back after the command buffer completes.
//   - Encoding: one open command buffer with one serial compute encoder, so dispatches run in order and
//     see each other's writes; synchronize() commits it and waits.
#include <Foundation/Foundation.hpp>
#include <Metal/Metal.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/metal/apple/kernel_bundle.h"
#include "backend/metal/launcher_mtl.h"
#include "core/errors.h"
#include "core/host_memory.h"

namespace mb::metal {

namespace {

// Releases the autoreleased objects metal-cpp hands out during one public call.
class AutoreleaseScope {
 public:
  AutoreleaseScope() : pool_(NS::AutoreleasePool::alloc()->init()) {}
  ~AutoreleaseScope() { pool_->release(); }
  AutoreleaseScope(const AutoreleaseScope&) = delete;
  AutoreleaseScope& operator=(const AutoreleaseScope&) = delete;

 private:
  NS::AutoreleasePool* pool_;
};

std::string describe(const NS::Error* error) {
  if (!error || !error->localizedDescription()) return "no error description";
  return error->localizedDescription()->utf8String();
}

NS::String* ns_string(const std::string& s) { return NS::String::string(s.c_str(), NS::UTF8StringEncoding); }

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

constexpr size_t kMaxArgBytes = 4096;  // setBytes' documented limit
constexpr size_t kMaxKernelsInMessage = 12;

// The pipeline of one kernel with what its reflection says about its [[buffer(i)]] parameters.
struct Pipeline {
  NS::SharedPtr<MTL::ComputePipelineState> state;
  uint32_t max_threads = 0;
  bool has_binding_info = false;
  std::map<NS::UInteger, NS::UInteger> buffer_data_size;  // [[buffer(index)]] -> bytes of its pointee type
};

// A binding resolved to a Metal buffer and the offset of the bound bytes in it.
struct Bound {
  MTL::Buffer* buffer = nullptr;
  NS::UInteger offset = 0;
};

// Host memory Metal cannot use in place (not recorded in core/host_memory.h), staged through a shared buffer.
struct Staged {
  char* host = nullptr;
  size_t bytes = 0;
  bool writable = false;
  NS::SharedPtr<MTL::Buffer> buffer;

  bool contains(const char* p, size_t n) const { return p >= host && p + n <= host + bytes; }
  bool overlaps(const char* p, size_t n) const { return p < host + bytes && host < p + n; }
};

// The command buffer being encoded and everything that must live until it completes.
struct OpenCommands {
  NS::SharedPtr<MTL::CommandBuffer> commands;
  NS::SharedPtr<MTL::ComputeCommandEncoder> encoder;
  std::vector<std::string> kernels;           // in encoding order, for error messages
  std::vector<std::shared_ptr<void>> owners;  // BufferBinding::owner of every encoded binding
  std::vector<Staged> staged;
};

// Cache key of a no-copy buffer: the region (base + id, as an address can be reused) and the window.
using WrapKey = std::tuple<uintptr_t, uint64_t, size_t, size_t>;

class MtlLauncher final : public KernelLauncher {
 public:
  explicit MtlLauncher(NS::SharedPtr<MTL::Device> device);

  const char* name() const override { return "metal"; }
  bool has_kernel(const std::string& kernel) const override;
  uint32_t max_threads_per_group(const std::string& kernel) const override;
  void dispatch(const Dispatch& d) override;
  void synchronize() override;
  size_t pending() const override;
  uint64_t command_buffers_committed() const override { return committed_.load(); }

 private:
  MTL::Library* library() const;                             // compiles the bundle once
  const Pipeline& pipeline(const std::string& kernel) const;  // creates it once
  Pipeline create_pipeline(const std::string& kernel) const;

  // The rest runs with mu_ held.
  Bound bind(const BufferBinding& b, std::vector<Staged>& fresh);
  Bound wrap_region(const HostRegion& region, const BufferBinding& b, std::vector<Staged>& fresh);
  Bound stage(const BufferBinding& b, std::vector<Staged>& fresh);
  bool conflicts_with_staged(const Dispatch& d) const;
  MTL::ComputeCommandEncoder* encoder();
  void commit_and_wait();
  void drop_stale_wraps();

  NS::SharedPtr<MTL::Device> device_;
  NS::SharedPtr<MTL::CommandQueue> queue_;
  NS::SharedPtr<MTL::Buffer> empty_;  // bound for zero-byte bindings (the kernel never reads them)
  size_t max_buffer_length_ = 0;
  size_t page_ = 0;

  mutable std::mutex compile_mu_;
  mutable bool compiled_ = false;
  mutable std::string compile_error_;
  mutable NS::SharedPtr<MTL::Library> library_;
  mutable std::set<std::string> functions_;

  mutable std::mutex pipelines_mu_;
  mutable std::unordered_map<std::string, std::unique_ptr<Pipeline>> pipelines_;

  mutable std::mutex mu_;  // encoding state below
  OpenCommands open_;
  std::map<WrapKey, NS::SharedPtr<MTL::Buffer>> wraps_;  // a null buffer: Metal refused to wrap it
  std::atomic<uint64_t> committed_{0};
};

MtlLauncher::MtlLauncher(NS::SharedPtr<MTL::Device> device) : device_(std::move(device)) {
  AutoreleaseScope pool;
  queue_ = NS::TransferPtr(device_->newCommandQueue());
  empty_ = NS::TransferPtr(device_->newBuffer(16, MTL::ResourceStorageModeShared));
  if (!queue_ || !empty_) throw DeviceError("metal: could not create a command queue on the default Metal device");
  max_buffer_length_ = size_t(device_->maxBufferLength());
  page_ = host_page_size();
}

// ---- kernels ----

MTL::Library* MtlLauncher::library() const {
  std::lock_guard<std::mutex> lk(compile_mu_);
  if (!compiled_) {
    AutoreleaseScope pool;
    compiled_ = true;  // a failure is remembered: compiling again would fail the same way
    auto options = NS::TransferPtr(MTL::CompileOptions::alloc()->init());
    options->setFastMathEnabled(false);                    // IEEE semantics, as the CPU backend
    options->setLanguageVersion(MTL::LanguageVersion3_1);  // MSL 3.1 (macOS 14): bfloat, simdgroup_matrix
    NS::Error* error = nullptr;
    library_ = NS::TransferPtr(device_->newLibrary(ns_string(kernel_source_bundle()), options.get(), &error));
    if (!library_) {
      compile_error_ = cat("metal: the kernel source bundle failed to compile: ", describe(error));
    } else {
      NS::Array* names = library_->functionNames();
      for (NS::UInteger i = 0; i < names->count(); ++i) functions_.insert(names->object<NS::String>(i)->utf8String());
    }
  }
  if (!library_) throw DeviceError(compile_error_);
  return library_.get();
}

bool MtlLauncher::has_kernel(const std::string& kernel) const {
  library();  // DeviceError with the compiler's message when the bundle does not compile
  std::lock_guard<std::mutex> lk(compile_mu_);
  return functions_.count(kernel) > 0;
}

uint32_t MtlLauncher::max_threads_per_group(const std::string& kernel) const { return pipeline(kernel).max_threads; }

const Pipeline& MtlLauncher::pipeline(const std::string& kernel) const {
  std::lock_guard<std::mutex> lk(pipelines_mu_);
  auto it = pipelines_.find(kernel);
  if (it == pipelines_.end()) it = pipelines_.emplace(kernel, std::make_unique<Pipeline>(create_pipeline(kernel))).first;
  return *it->second;  // stable address: entries are never erased
}

Pipeline MtlLauncher::create_pipeline(const std::string& kernel) const {
  MTL::Library* lib = library();
  AutoreleaseScope pool;
  auto function = NS::TransferPtr(lib->newFunction(ns_string(kernel)));
  if (!function) throw DeviceError(cat("metal: no kernel named '", kernel, "'"));
  // Reflection gives every [[buffer(i)]] parameter and its pointee size, to check bindings at encode.
  MTL::AutoreleasedComputePipelineReflection reflection = nullptr;
  NS::Error* error = nullptr;
  Pipeline p;
  p.state = NS::TransferPtr(device_->newComputePipelineState(
      function.get(), MTL::PipelineOptionBindingInfo | MTL::PipelineOptionBufferTypeInfo, &reflection, &error));
  if (!p.state) throw DeviceError(cat("metal: kernel '", kernel, "': pipeline creation failed: ", describe(error)));
  p.max_threads = uint32_t(p.state->maxTotalThreadsPerThreadgroup());
  if (reflection && reflection->bindings()) {
    p.has_binding_info = true;
    NS::Array* bindings = reflection->bindings();
    for (NS::UInteger i = 0; i < bindings->count(); ++i) {
      auto* b = bindings->object<MTL::Binding>(i);
      if (b->type() != MTL::BindingTypeBuffer) continue;
      p.buffer_data_size[b->index()] = static_cast<MTL::BufferBinding*>(b)->bufferDataSize();
    }
  }
  return p;
}

// Encode-time checks: Metal itself would not report these, it would read garbage or fault later.
void check_group_and_args(const Pipeline& p, const Dispatch& d) {
  const uint64_t threads = d.group.count();
  if (threads == 0 || threads > p.max_threads)
    throw DeviceError(cat("metal: kernel '", d.kernel, "': threadgroup of ", d.group.x, "x", d.group.y, "x", d.group.z,
                          " threads (this pipeline allows 1 to ", p.max_threads, ")"));
  if (d.args.size() > kMaxArgBytes)
    throw DeviceError(cat("metal: kernel '", d.kernel, "': ", d.args.size(), " bytes of constant arguments (at most ",
                          kMaxArgBytes, ")"));
  for (size_t i = 0; i < d.buffers.size(); ++i)
    if (!d.buffers[i].data && d.buffers[i].bytes) throw DeviceError(cat("metal: kernel '", d.kernel, "': buffer(", i, ") is null"));
}

// Every buffer parameter of the kernel is bound, and the argument blob lands on its constant-arguments
// parameter with the right size (a shifted index would read a device buffer as arguments).
void check_against_reflection(const Pipeline& p, const Dispatch& d) {
  if (!p.has_binding_info || p.buffer_data_size.empty()) return;
  const size_t expected = d.buffers.size() + (d.args.empty() ? 0 : 1);
  const NS::UInteger highest = p.buffer_data_size.rbegin()->first;
  if (highest >= expected)
    throw DeviceError(cat("metal: kernel '", d.kernel, "' has a parameter at buffer(", highest, "), the dispatch binds ",
                          d.buffers.size(), " buffers", d.args.empty() ? "" : " and an argument blob"));
  if (d.args.empty()) return;
  auto it = p.buffer_data_size.find(d.buffers.size());
  if (it == p.buffer_data_size.end() || it->second != d.args.size())
    throw DeviceError(cat("metal: kernel '", d.kernel, "': the dispatch passes ", d.args.size(),
                          " bytes of constant arguments at buffer(", d.buffers.size(), "), the kernel's parameter there takes ",
                          it == p.buffer_data_size.end() ? std::string("nothing (no such parameter)") : cat(it->second, " bytes")));
}

// As in metal-sim: a writable binding may not partially overlap another one (identical = in place).
void check_overlaps(const Dispatch& d) {
  for (size_t i = 0; i < d.buffers.size(); ++i) {
    for (size_t j = i + 1; j < d.buffers.size(); ++j) {
      const BufferBinding &a = d.buffers[i], &b = d.buffers[j];
      if (!(a.writable || b.writable) || !a.bytes || !b.bytes) continue;
      const char *a0 = static_cast<const char*>(a.data), *b0 = static_cast<const char*>(b.data);
      if (a0 < b0 + b.bytes && b0 < a0 + a.bytes && !(a0 == b0 && a.bytes == b.bytes))
        throw DeviceError(cat("metal: kernel '", d.kernel, "': buffer(", i, ") and buffer(", j,
                              ") partially overlap and one of them is writable"));
    }
  }
}

// ---- encoding ----

void MtlLauncher::dispatch(const Dispatch& d) {
  const Pipeline& p = pipeline(d.kernel);  // compiles outside the encoding lock
  check_group_and_args(p, d);
  check_against_reflection(p, d);
  check_overlaps(d);
  if (d.grid.count() == 0) return;
  AutoreleaseScope pool;
  std::lock_guard<std::mutex> lk(mu_);
  // A staged copy of host memory that this dispatch would see differently is settled first.
  if (conflicts_with_staged(d)) commit_and_wait();
  std::vector<Staged> fresh;  // staged by this dispatch; joins open_ only once it is encoded
  std::vector<Bound> bound;
  for (const BufferBinding& b : d.buffers) bound.push_back(bind(b, fresh));

  MTL::ComputeCommandEncoder* enc = encoder();
  enc->setComputePipelineState(p.state.get());
  for (size_t i = 0; i < bound.size(); ++i) enc->setBuffer(bound[i].buffer, bound[i].offset, NS::UInteger(i));
  if (!d.args.empty()) enc->setBytes(d.args.data(), NS::UInteger(d.args.size()), NS::UInteger(d.buffers.size()));
  enc->dispatchThreadgroups(MTL::Size(d.grid.x, d.grid.y, d.grid.z), MTL::Size(d.group.x, d.group.y, d.group.z));

  open_.kernels.push_back(d.kernel);
  for (const BufferBinding& b : d.buffers)
    if (b.owner) open_.owners.push_back(b.owner);
  for (Staged& s : fresh) open_.staged.push_back(std::move(s));
}

Bound MtlLauncher::bind(const BufferBinding& b, std::vector<Staged>& fresh) {
  if (b.bytes == 0) return {empty_.get(), 0};
  HostRegion region;
  if (find_host_region(b.data, b.bytes, &region)) return wrap_region(region, b, fresh);
  return stage(b, fresh);
}

// Wraps the recorded allocation (or a page-aligned window of it) without copying and binds by offset.
Bound MtlLauncher::wrap_region(const HostRegion& region, const BufferBinding& b, std::vector<Staged>& fresh) {
  const char* base = static_cast<const char*>(region.base);
  const size_t offset = size_t(static_cast<const char*>(b.data) - base);
  // Allocations and file mappings own whole pages, so the length may be rounded up to the page size.
  const size_t length = round_up(region.bytes, page_);
  size_t start = 0, span = length;
  if (length > max_buffer_length_) {
    start = offset / page_ * page_;
    span = std::min(round_up(offset + b.bytes, page_), length) - start;
    if (span > max_buffer_length_)
      throw DeviceError(cat("metal: a binding of ", b.bytes, " bytes exceeds the device's buffer limit of ",
                            max_buffer_length_, " bytes"));
  }
  const WrapKey key{uintptr_t(base), region.id, start, span};
  auto it = wraps_.find(key);
  if (it == wraps_.end()) {
    MTL::Buffer* buf = nullptr;
    if (uintptr_t(base) % page_ == 0)
      buf = device_->newBuffer(base + start, NS::UInteger(span), MTL::ResourceStorageModeShared, nullptr);
    if (!buf)
      std::fprintf(stderr, "markbase metal: could not wrap host memory at %p (%zu bytes) without a copy; "
                           "bindings in it are staged (copied) instead\n", static_cast<const void*>(base + start), span);
    it = wraps_.emplace(key, NS::TransferPtr(buf)).first;
  }
  if (!it->second) return stage(b, fresh);
  return {it->second.get(), NS::UInteger(offset - start)};
}

// Memory Metal cannot use in place: one shared buffer per host range and command buffer, so later
// dispatches of the same command buffer see what earlier ones wrote there.
Bound MtlLauncher::stage(const BufferBinding& b, std::vector<Staged>& fresh) {
  char* p = static_cast<char*>(b.data);
  for (std::vector<Staged>* list : {&open_.staged, &fresh}) {
    for (Staged& s : *list) {
      if (!s.contains(p, b.bytes)) continue;
      s.writable = s.writable || b.writable;
      return {s.buffer.get(), NS::UInteger(p - s.host)};
    }
  }
  Staged s{p, b.bytes, b.writable, NS::TransferPtr(device_->newBuffer(NS::UInteger(b.bytes), MTL::ResourceStorageModeShared))};
  if (!s.buffer) throw DeviceError(cat("metal: could not allocate a ", b.bytes, "-byte staging buffer"));
  std::memcpy(s.buffer->contents(), p, b.bytes);
  fresh.push_back(std::move(s));
  return {fresh.back().buffer.get(), 0};
}

// True when a binding partially overlaps a staged range of the open command buffer and either is
// written: two separate staging copies of the same bytes would then diverge.
bool MtlLauncher::conflicts_with_staged(const Dispatch& d) const {
  for (const BufferBinding& b : d.buffers) {
    const char* p = static_cast<const char*>(b.data);
    if (!b.bytes) continue;
    for (const Staged& s : open_.staged)
      if (s.overlaps(p, b.bytes) && !s.contains(p, b.bytes) && (s.writable || b.writable)) return true;
  }
  return false;
}

// The open command buffer's encoder, creating both when none is open (they are kept beyond this call).
MTL::ComputeCommandEncoder* MtlLauncher::encoder() {
  if (!open_.commands) {
    auto commands = NS::RetainPtr(queue_->commandBuffer());
    if (!commands) throw DeviceError("metal: could not create a command buffer");
    auto encoder = NS::RetainPtr(commands->computeCommandEncoder());  // serial: dispatches run in order
    if (!encoder) throw DeviceError("metal: could not create a compute command encoder");
    open_.commands = std::move(commands);
    open_.encoder = std::move(encoder);
  }
  return open_.encoder.get();
}

size_t MtlLauncher::pending() const {
  std::lock_guard<std::mutex> lk(mu_);
  return open_.kernels.size();
}

// ---- completion ----

void MtlLauncher::synchronize() {
  AutoreleaseScope pool;
  std::lock_guard<std::mutex> lk(mu_);
  commit_and_wait();
}

std::string kernel_list(const std::vector<std::string>& kernels) {
  std::string s;
  for (size_t i = 0; i < kernels.size() && i < kMaxKernelsInMessage; ++i) s += cat(i ? ", " : "", kernels[i]);
  if (kernels.size() > kMaxKernelsInMessage) s += cat(", ... (", kernels.size(), " dispatches)");
  return s;
}

// Commits the open command buffer and waits; its owners are released when `done` goes out of scope.
void MtlLauncher::commit_and_wait() {
  if (!open_.commands) return;
  OpenCommands done = std::move(open_);
  open_ = OpenCommands{};
  done.encoder->endEncoding();
  done.commands->commit();
  ++committed_;
  done.commands->waitUntilCompleted();
  if (done.commands->status() != MTL::CommandBufferStatusCompleted)
    throw DeviceError(cat("metal: command buffer failed (", describe(done.commands->error()), "); it held kernels: ",
                          kernel_list(done.kernels)));
  for (const Staged& s : done.staged)
    if (s.writable) std::memcpy(s.host, s.buffer->contents(), s.bytes);
  drop_stale_wraps();
}

// Forgets wrapped buffers of allocations that are gone (nothing is in flight here).
void MtlLauncher::drop_stale_wraps() {
  for (auto it = wraps_.begin(); it != wraps_.end();) {
    const auto& [base, id, start, span] = it->first;
    HostRegion now;
    const bool alive = find_host_region(reinterpret_cast<const void*>(base), 1, &now) && uintptr_t(now.base) == base && now.id == id;
    it = alive ? std::next(it) : wraps_.erase(it);
  }
}

// The system default device, or null with the reason.
NS::SharedPtr<MTL::Device> default_device(std::string* why) {
  AutoreleaseScope pool;
  auto device = NS::TransferPtr(MTL::CreateSystemDefaultDevice());
  if (!device && why) *why = "MTLCreateSystemDefaultDevice() found no Metal device on this machine";
  return device;
}

}  // namespace

bool mtl_available(std::string* why) {
  // Asked on every device lookup (devices(), each op call naming a device): probe the GPU once.
  static const std::pair<bool, std::string> answer = [] {
    std::string reason;
    const bool ok = bool(default_device(&reason));
    return std::make_pair(ok, reason);
  }();
  if (!answer.first && why) *why = answer.second;
  return answer.first;
}

KernelLauncher& mtl_launcher() {
  static std::mutex mu;
  static MtlLauncher* launcher = nullptr;  // never destroyed: bindings may be released during static teardown
  std::lock_guard<std::mutex> lk(mu);
  if (!launcher) {
    std::string why;
    auto device = default_device(&why);
    if (!device) throw DeviceError(cat("device 'metal' is not available: ", why));
    launcher = new MtlLauncher(std::move(device));
  }
  return *launcher;
}

}  // namespace mb::metal
