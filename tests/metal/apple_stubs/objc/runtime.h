// Stub of <objc/runtime.h> for syntax-checking metal-cpp on Linux (tests/metal/apple_stubs/README.md).
#pragma once

typedef struct objc_class* Class;
typedef struct objc_object {
  Class isa;
}* id;
typedef struct objc_selector* SEL;
typedef struct objc_object Protocol;

extern "C" {
SEL sel_registerName(const char* str);
Class objc_lookUpClass(const char* name);
Protocol* objc_getProtocol(const char* name);
}
