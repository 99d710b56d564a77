// Stub of <IOSurface/IOSurfaceRef.h> for syntax-checking metal-cpp on Linux (tests/metal/apple_stubs/README.md).
#pragma once

typedef struct __IOSurface* IOSurfaceRef;
