// Peak multiply-add rates of one core's vector dot-product instructions, for bench/isa_probe.py: the
// figures behind the kernels' choice of instruction (f32 FMA, bf16 pairs, 16-bit or 8-bit integer pairs).
#pragma once
#include <string>
#include <vector>

namespace mb::cpu {

struct IsaRate {
  std::string instruction;  // e.g. "vdpbf16ps zmm"
  double gmacs;             // multiply-adds per second / 1e9 on the calling thread; 0 when the CPU lacks it
};

// Each instruction in a loop of 12 independent accumulators (latency hidden), for about `seconds` each.
std::vector<IsaRate> measure_isa_rates(double seconds);

}  // namespace mb::cpu
