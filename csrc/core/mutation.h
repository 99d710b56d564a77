#pragma once
// Planted defects for scripts/mutation-check: each names a step the oracle tests must be able to catch. They
// exist only in a build configured with -DMARKBASE_MUTATIONS=ON; MARKBASE_MUTATION=<name> turns one on for the
// process. In every other build `mutation()` is a constant false and the defects compile away.

#if MARKBASE_MUTATIONS
#include <cstdlib>
#include <cstring>
#endif

namespace mb {

#if MARKBASE_MUTATIONS
inline bool mutation(const char* name) {
  static const char* active = std::getenv("MARKBASE_MUTATION");
  return active && std::strcmp(active, name) == 0;
}
#else
constexpr bool mutation(const char*) { return false; }
#endif

}  // namespace mb
