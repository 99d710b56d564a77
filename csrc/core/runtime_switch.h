// A process-wide on/off switch for a code path (huge pages, a kernel choice): its default from an
// environment variable, read on first use, and an override tests and A/B runs set and clear at run time.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace mb {

class RuntimeSwitch {
 public:
  explicit constexpr RuntimeSwitch(const char* env_var) : env_var_(env_var) {}

  // The override while one is set, else the environment: "0" / "off" off, "1" / "on" on, else `by_default`.
  bool enabled(bool by_default = true) const {
    const int choice = override_.load(std::memory_order_relaxed);
    if (choice >= 0) return choice == 1;
    const int env = environment();
    return env < 0 ? by_default : env == 1;
  }
  // 0 off, 1 (any other positive) on, -1 back to the environment.
  void set(int mode) { override_.store(mode < 0 ? -1 : mode ? 1 : 0, std::memory_order_relaxed); }

 private:
  int environment() const {  // read once: 0 off, 1 on, -1 unset or neither
    int env = env_.load(std::memory_order_relaxed);
    if (env == kUnread) {
      const char* v = std::getenv(env_var_);
      env = !v ? -1
            : std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0 ? 0
            : std::strcmp(v, "1") == 0 || std::strcmp(v, "on") == 0  ? 1
                                                                     : -1;
      env_.store(env, std::memory_order_relaxed);
    }
    return env;
  }

  static constexpr int kUnread = -2;
  const char* env_var_;
  std::atomic<int> override_{-1};
  mutable std::atomic<int> env_{kUnread};
};

}  // namespace mb
