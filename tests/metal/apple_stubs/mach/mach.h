// Stub of <mach/mach.h> for syntax-checking metal-cpp on Linux (tests/metal/apple_stubs/README.md).
#pragma once

typedef int kern_return_t;
typedef unsigned int mach_port_t;
typedef mach_port_t task_id_token_t;
