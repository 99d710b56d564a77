// metal-sim runtime ABI: the boundary between kernels compiled by clang (metal/*.metal as C++) and the
// launcher compiled by the project's compiler (csrc/backend/metal/launcher_sim.cpp).
// Plain structs and functions only, so both compilers agree on every layout. No MSL macros here.
#pragma once
#include <cstddef>
#include <cstdint>

namespace metal_sim::rt {

constexpr int kSimdWidth = 32;              // lanes per simdgroup (Apple GPUs)
constexpr int kMaxThreadsPerGroup = 1024;   // Metal's limit for a threadgroup
constexpr size_t kThreadgroupMemoryBytes = 32768;  // Apple GPUs: 32 KiB of threadgroup memory
constexpr size_t kSimdSlotBytes = 32;       // largest value a simd_* function exchanges (e.g. ulong4)
constexpr int kMaxKernelParams = 31;        // Metal's buffer argument table has 31 entries

// One bound buffer as a kernel sees it. `writable` is the binding's access (read-only inputs are false).
struct BufferView {
  unsigned char* data;
  size_t bytes;
  const char* kernel;  // for error messages
  int index;           // [[buffer(index)]]
  bool writable;
};

// The built-in thread-position values of one thread (the kernel's trailing parameters).
struct ThreadPos {
  uint32_t thread_in_grid[3];        // [[thread_position_in_grid]]
  uint32_t thread_in_group[3];       // [[thread_position_in_threadgroup]]
  uint32_t group_in_grid[3];         // [[threadgroup_position_in_grid]]
  uint32_t threads_per_group[3];     // [[threads_per_threadgroup]]
  uint32_t groups_per_grid[3];       // [[threadgroups_per_grid]]
  uint32_t index_in_group;           // [[thread_index_in_threadgroup]]
  uint32_t simd_lane;                // [[thread_index_in_simdgroup]]
  uint32_t simd_group;               // [[simdgroup_index_in_threadgroup]]
};

// Everything one dispatch binds: buffers[i] is [[buffer(i)]]; the constant-args blob follows them.
struct CallArgs {
  const char* kernel;
  const BufferView* buffers;
  int num_buffers;
  const void* args;
  size_t args_bytes;
};

// How a kernel parameter is bound (derived from its C++ type by the adapter in kernel_adapter.h).
enum class ParamKind : uint8_t {
  DeviceConst,     // device const T*  -> a buffer the kernel only reads
  DeviceWritable,  // device T*        -> a buffer the kernel may write
  ConstantArgs,    // constant Args&   -> the dispatch's argument blob (always the last buffer)
};

using InvokeFn = void (*)(const CallArgs&, const ThreadPos&);

struct KernelInfo {
  const char* name;
  const char* file;
  InvokeFn invoke;             // runs one thread of the kernel
  int num_params;              // buffer parameters (device pointers + constant args)
  ParamKind params[kMaxKernelParams];
  uint32_t elem_bytes[kMaxKernelParams];  // sizeof(T) of a device pointer parameter (the args: sizeof(Args))
  size_t args_bytes;           // sizeof(Args) when the last parameter is ConstantArgs, else 0
};

// Kernel table (static registration from each .metal translation unit).
void register_kernel(const KernelInfo& info);

// ---- Called from kernel code while a thread runs (inside the launcher's scheduler). ----

// A checked device-pointer access fell outside its buffer or was misaligned: throws mb::DeviceError.
[[noreturn]] void fail_access(const BufferView& b, long long byte_offset, size_t access_bytes, bool misaligned);
// A kernel-side check failed (e.g. an unsupported use of a built-in): throws mb::DeviceError.
[[noreturn]] void fail(const char* what);

// Where a simdgroup call is in the kernel source (std::source_location of the call): the full checks
// require every lane of a round to come from the same call, and name it in messages.
struct CallSite {
  const char* file;
  uint32_t line;
  uint32_t column;
};

// Blocks until every thread of the threadgroup has arrived. `mem_flags` is MSL's mem_flags bit set: with
// mem_threadgroup (2) the barrier also orders threadgroup memory (full checks start a new race epoch).
void threadgroup_barrier(unsigned mem_flags);
// Blocks until every active lane of the calling thread's simdgroup has arrived.
void simdgroup_barrier(unsigned mem_flags, CallSite site);

// The result of a reduction over all lanes of a round (simd_sum, simd_max, ...), the same in every lane: the
// first lane to compute it leaves it here for the others. `key` names the reduction; reset when a round opens.
struct SimdMemo {
  const void* key;
  bool any;
  alignas(16) unsigned char value[kSimdSlotBytes];
};
// One simd_* exchange: each active lane deposits `bytes` (<= kSimdSlotBytes) and waits for the others.
// Afterwards `slots + lane * kSimdSlotBytes` holds lane's value for every lane set in `active`.
// With full checks every lane of a round must come from the same call.
struct SimdRound {
  const unsigned char* slots;
  uint32_t active;  // bit l: lane l took part (lanes that returned from the kernel are inactive)
  uint32_t lane;    // the caller's lane
  SimdMemo* memo;   // this round's
};
SimdRound simd_exchange(const void* value, size_t bytes, CallSite site);

// A simdgroup_matrix load / store / multiply. With full checks it is a collective step that all 32 lanes
// of the simdgroup must reach together at the same call; without, it returns at once.
struct MatrixStep {
  uint32_t lane;     // the caller's lane
  bool distribute;   // full checks: a store into threadgroup memory writes only this lane's share
};
MatrixStep simdgroup_matrix_step(CallSite site);
// True when `p` points into the running threadgroup's threadgroup memory.
bool is_threadgroup_memory(const void* p);
// Copies `rows` rows of `row_bytes` from src (rows `stride_bytes` apart) into dst (packed). With full checks a
// row in the running group's threadgroup memory is one read by the calling thread, as the load hooks check
// each element; the copy itself is not instrumented (simdgroup_load: one check per row, not per element).
void read_rows(void* dst, const void* src, size_t row_bytes, size_t rows, size_t stride_bytes);
// An atomic operation on threadgroup memory: its bytes count as written (atomics are exempt from the race
// check, and the sim does not see them otherwise).
void note_threadgroup_atomic(const void* p, size_t bytes);

// Threadgroup storage declared in a kernel body (MB_THREADGROUP): the first thread of the group to
// reach the declaration allocates, the others get the same memory. `key` identifies the declaration,
// `name` is the variable's name (for error messages).
// New storage is filled with 0xFF bytes (NaN for floats), as Metal leaves it undefined; with full checks
// reading a byte no thread has written is an error.
void* threadgroup_alloc(const void* key, size_t bytes, size_t align, const char* name);

}  // namespace metal_sim::rt
