// Op-level wall-clock profile of what runs on the CPU backend: time between consecutive ops attributed to
// the later one (ops run eagerly there, so that is its run time plus the dispatch around it), grouped by
// op name and output shape. For finding where a decode step goes (bench/profile_decode.py); one profile
// at a time, process-wide. On a deferred backend (Metal) it times encoding, not execution.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mb::runtime {

struct OpProfileEntry {
  std::string key;   // "linear_quantized [1, 2048]"
  int64_t count = 0;
  double seconds = 0;
};

void op_profile_start();
// Stops and returns the entries, most time first.
std::vector<OpProfileEntry> op_profile_stop();

}  // namespace mb::runtime
