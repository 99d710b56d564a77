// Stub of <objc/message.h> for syntax-checking metal-cpp on Linux (tests/metal/apple_stubs/README.md).
// Declared as the SDK does by default (OBJC_OLD_DISPATCH_PROTOTYPES = 0): callers cast to the real type.
#pragma once
#include <objc/runtime.h>

extern "C" {
void objc_msgSend(void);
void objc_msgSend_fpret(void);
void objc_msgSend_stret(void);
}
