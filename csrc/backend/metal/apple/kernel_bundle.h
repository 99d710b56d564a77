// The Metal kernels as one MSL source, embedded in the library so no Xcode / metallib is needed to build.
// Defined in a file that scripts/bundle_metal_sources.py generates from metal/ at build time (CMake).
#pragma once

namespace mb::metal {

// Every metal/*.metal with its project headers inlined once (NUL-terminated, UTF-8).
const char* kernel_source_bundle();

}  // namespace mb::metal
