// Stub of <dispatch/dispatch.h> for syntax-checking metal-cpp on Linux (tests/metal/apple_stubs/README.md).
#pragma once

typedef struct dispatch_queue_s* dispatch_queue_t;
typedef struct dispatch_data_s* dispatch_data_t;
