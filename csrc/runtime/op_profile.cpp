#include "runtime/op_profile.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>

#include "core/errors.h"
#include "ops/observer.h"

namespace mb::runtime {

namespace {

using Clock = std::chrono::steady_clock;

class OpProfiler : public ops::OpObserver {
 public:
  void after_op(const char* op, const Backend&, std::span<const Tensor>, std::span<const Tensor> outputs) override {
    const auto now = Clock::now();
    std::lock_guard<std::mutex> lk(mu_);
    std::string key = op;
    if (!outputs.empty() && outputs[0].defined()) key += " " + shape_str(outputs[0].shape());
    auto& e = by_key_[key];
    e.count += 1;
    e.seconds += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  std::vector<OpProfileEntry> entries() const {
    std::vector<OpProfileEntry> out;
    for (const auto& [k, v] : by_key_) out.push_back({k, v.count, v.seconds});
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
    return out;
  }

 private:
  struct Acc {
    int64_t count = 0;
    double seconds = 0;
  };
  std::mutex mu_;
  Clock::time_point last_ = Clock::now();
  std::map<std::string, Acc> by_key_;
};

std::unique_ptr<OpProfiler>& active() {
  static std::unique_ptr<OpProfiler> p;
  return p;
}

}  // namespace

void op_profile_start() {
  if (active()) throw InputError("op_profile_start: a profile is already running");
  active() = std::make_unique<OpProfiler>();
  ops::set_op_observer(active().get());
}

std::vector<OpProfileEntry> op_profile_stop() {
  if (!active()) throw InputError("op_profile_stop: no profile is running");
  ops::set_op_observer(nullptr);
  auto out = active()->entries();
  active().reset();
  return out;
}

}  // namespace mb::runtime
