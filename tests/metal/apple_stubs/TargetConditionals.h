// Stub of <TargetConditionals.h> for syntax-checking metal-cpp on Linux (tests/metal/apple_stubs/README.md):
// the target is macOS.
#pragma once

#define TARGET_OS_OSX 1
#define TARGET_OS_IPHONE 0
