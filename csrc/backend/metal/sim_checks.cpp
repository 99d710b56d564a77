#include "backend/metal/sim_checks.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "backend/metal/sim_group.h"
#include "core/errors.h"
#include "sim/runtime.h"

namespace mb::metal::sim {

namespace rt = metal_sim::rt;

Checks checks_from_env() {
  const char* env = std::getenv("MARKBASE_SIM_CHECKS");
  if (!env || !*env || std::strcmp(env, "full") == 0) return Checks::Full;
  if (std::strcmp(env, "basic") == 0) return Checks::Basic;
  throw InputError(cat("metal-sim: MARKBASE_SIM_CHECKS must be 'full' or 'basic', got '", env, "'"));
}

// ---- arenas: kArenas slots of 32 KiB in one reservation (pages are touched only when used) ----
namespace {
constexpr size_t kArenas = 1024;  // OS threads running threadgroups at once (pool workers + callers)
std::mutex g_arena_mu;
std::vector<unsigned char*> g_free_arenas;
size_t g_arenas_handed = 0;
// Read by the access hooks without the lock (relaxed: set once, before the first arena is handed out).
std::atomic<uintptr_t> g_arena_base{0};
std::atomic<size_t> g_arena_span{0};
}  // namespace

unsigned char* take_arena() {
  std::lock_guard<std::mutex> lk(g_arena_mu);
  if (!g_arena_base.load()) {
    void* p = mmap(nullptr, kArenas * rt::kThreadgroupMemoryBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw DeviceError("metal-sim: cannot reserve threadgroup memory");
    g_arena_base.store(reinterpret_cast<uintptr_t>(p));
    g_arena_span.store(kArenas * rt::kThreadgroupMemoryBytes);
  }
  if (!g_free_arenas.empty()) {
    unsigned char* a = g_free_arenas.back();
    g_free_arenas.pop_back();
    return a;
  }
  if (g_arenas_handed == kArenas)
    throw DeviceError(cat("metal-sim: more than ", kArenas, " OS threads run threadgroups at once"));
  return reinterpret_cast<unsigned char*>(g_arena_base.load()) + rt::kThreadgroupMemoryBytes * g_arenas_handed++;
}

void give_back_arena(unsigned char* arena) {
  std::lock_guard<std::mutex> lk(g_arena_mu);
  g_free_arenas.push_back(arena);
}

// ---- code locations ----
namespace {
uintptr_t library_base() {
  static const uintptr_t base = [] {
    Dl_info info{};
    return dladdr(reinterpret_cast<const void*>(&library_base), &info) ? reinterpret_cast<uintptr_t>(info.dli_fbase) : 0;
  }();
  return base;
}
std::string library_path() {
  Dl_info info{};
  return dladdr(reinterpret_cast<const void*>(&library_base), &info) && info.dli_fname ? info.dli_fname : "";
}

// "file:line:column" -> "file:line"; false (s unchanged) when s does not end in two numbers.
bool drop_column(std::string& s) {
  auto number_before = [&](size_t end) {  // start of the digits ending at `end`, npos if none
    size_t b = end;
    while (b > 0 && s[b - 1] >= '0' && s[b - 1] <= '9') --b;
    return b < end && b > 0 && s[b - 1] == ':' ? b - 1 : std::string::npos;
  };
  const size_t column = number_before(s.size());
  if (column == std::string::npos || number_before(column) == std::string::npos) return false;
  s.resize(column);
  return true;
}

}  // namespace

std::string source_path(const std::string& where) {
  const size_t m = where.rfind("/metal/");
  return m == std::string::npos ? where : where.substr(m + 1);
}

uint32_t code_offset(const void* return_address) {
  const uintptr_t pc = reinterpret_cast<uintptr_t>(return_address);
  const uintptr_t base = library_base();
  return pc > base && pc - base < UINT32_MAX ? uint32_t(pc - base) : 0;
}

// addr2line -i lists the inlined frames innermost first; the first one in a kernel source (not a
// metal/sim/ header) is the line to show, with the innermost one when that is a sim built-in.
std::string code_location(uint32_t code) {
  if (!code) return "an unknown place";
  static std::mutex mu;
  static std::map<uint32_t, std::string> cache;
  std::lock_guard<std::mutex> lk(mu);
  if (auto it = cache.find(code); it != cache.end()) return it->second;
  std::string result = cat("code offset 0x", [&] {
    char b[32];
    std::snprintf(b, sizeof b, "%x", code);
    return std::string(b);
  }());
  const std::string lib = library_path();
  if (!lib.empty() && lib.find('\'') == std::string::npos) {
    char cmd[4400];
    // code - 1: a return address points after its call; the call's own line is wanted.
    // env -u LD_PRELOAD: under scripts/sanitize-check the ASan runtime must not load into the symbolizer.
#ifdef MARKBASE_SIM_SYMBOLIZER
    const char* symbolizer = access(MARKBASE_SIM_SYMBOLIZER, X_OK) == 0 ? MARKBASE_SIM_SYMBOLIZER : nullptr;
#else
    const char* symbolizer = nullptr;
#endif
    if (symbolizer)  // lines "function" then "file:line:column" per frame, innermost first
      std::snprintf(cmd, sizeof cmd, "env -u LD_PRELOAD '%s' --inlining --obj='%s' 0x%x 2>/dev/null", symbolizer,
                    lib.c_str(), code - 1);
    else  // lines "file:line" per frame, innermost first
      std::snprintf(cmd, sizeof cmd, "env -u LD_PRELOAD addr2line -i -e '%s' 0x%x 2>/dev/null", lib.c_str(), code - 1);
    if (FILE* f = popen(cmd, "r")) {
      std::vector<std::string> frames;
      char line[4096];
      while (std::fgets(line, sizeof line, f)) {
        std::string s(line);
        while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
        const size_t paren = s.find(" (discriminator");
        if (paren != std::string::npos) s.resize(paren);
        if (symbolizer && !drop_column(s)) continue;  // a function name
        if (!s.empty() && s.find("??") == std::string::npos) frames.push_back(source_path(s));
      }
      pclose(f);
      for (size_t i = 0; i < frames.size(); ++i) {
        if (frames[i].rfind("metal/sim/", 0) == 0) continue;
        result = frames[i];
        if (i > 0) result += cat(" (via ", frames[0], ")");
        break;
      }
      if (result.rfind("code offset", 0) == 0 && !frames.empty()) result = frames[0];
    }
  }
  cache.emplace(code, result);
  return result;
}

}  // namespace mb::metal::sim

// ---- the access hooks clang inserts before every load and store of the metal-sim objects ----
// Hidden, so the extension binds them at link time (a sanitizer runtime defines weak versions too).
namespace {
using mb::metal::sim::g_arena_base;
using mb::metal::sim::g_arena_span;

inline __attribute__((always_inline)) void on_access(const void* p, size_t bytes, bool write, const void* ret) {
  const uintptr_t off = reinterpret_cast<uintptr_t>(p) - g_arena_base.load(std::memory_order_relaxed);
  if (off >= g_arena_span.load(std::memory_order_relaxed)) return;  // not threadgroup memory (device buffers, the stack, ...)
  mb::metal::sim::GroupRunner::threadgroup_access(reinterpret_cast<const unsigned char*>(p), bytes, write, ret);
}
}  // namespace

#define MB_SIM_HOOK extern "C" __attribute__((visibility("hidden"))) void
MB_SIM_HOOK __sanitizer_cov_load1(uint8_t* p) { on_access(p, 1, false, __builtin_return_address(0)); }
MB_SIM_HOOK __sanitizer_cov_load2(uint16_t* p) { on_access(p, 2, false, __builtin_return_address(0)); }
MB_SIM_HOOK __sanitizer_cov_load4(uint32_t* p) { on_access(p, 4, false, __builtin_return_address(0)); }
MB_SIM_HOOK __sanitizer_cov_load8(uint64_t* p) { on_access(p, 8, false, __builtin_return_address(0)); }
MB_SIM_HOOK __sanitizer_cov_load16(__int128* p) { on_access(p, 16, false, __builtin_return_address(0)); }
MB_SIM_HOOK __sanitizer_cov_store1(uint8_t* p) { on_access(p, 1, true, __builtin_return_address(0)); }
MB_SIM_HOOK __sanitizer_cov_store2(uint16_t* p) { on_access(p, 2, true, __builtin_return_address(0)); }
MB_SIM_HOOK __sanitizer_cov_store4(uint32_t* p) { on_access(p, 4, true, __builtin_return_address(0)); }
MB_SIM_HOOK __sanitizer_cov_store8(uint64_t* p) { on_access(p, 8, true, __builtin_return_address(0)); }
MB_SIM_HOOK __sanitizer_cov_store16(__int128* p) { on_access(p, 16, true, __builtin_return_address(0)); }
