// Stub of <CoreFoundation/CoreFoundation.h> for syntax-checking metal-cpp on Linux
// (tests/metal/apple_stubs/README.md). The real header includes the C library headers; metal-cpp
// relies on <math.h> from it (INFINITY).
#pragma once
#include <math.h>

typedef double CFTimeInterval;
