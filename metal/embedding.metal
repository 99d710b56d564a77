// Embedding kernels (ops/embedding.h): out[t, d] = f32(table[ids[t], d]) * scale, one f32 multiply and
// one rounding to out's dtype per element, so the result is bit-identical to the CPU backend.
// The ids were validated (every id in [0, V)) by the front door; only looked-up rows are read.
//
// Work split: threadgroup (g, t) covers elements [g*4*T, (g+1)*4*T) of output row t (T threads per
// group); thread l handles d = base + l, base + l + T, base + l + 2T, base + l + 3T, so neighbouring
// threads read neighbouring table bytes. Dispatch: csrc/backend/metal/embedding_dispatch.cpp.
//
// Kernel names embedding_gather_<table dtype>_<ids dtype>_<out dtype>.
// Bytes per call (St = table bytes per element: 4 f32, 2 bf16 / f16; Si = 4 i32, 8 i64; So = out's;
// T tokens of D elements; plus 12 bytes of args): reads T*D*St (the looked-up rows) + T*Si (ids, each
// id read by every thread of its groups: cache-resident), writes T*D*So.
#include "kernel_common.h"
#include "kernel_args.h"

static constant constexpr uint kEmbeddingPerThread = 4;

template <typename TS, typename IS, typename OS>
inline void gather_body(DEVICE_PTR(const TS) table, DEVICE_PTR(const IS) ids, DEVICE_PTR(OS) out,
                        constant EmbeddingArgs& args, uint2 group, uint lidx, uint group_threads) {
  const uint t = group.y;
  if (t >= args.T) return;
  const uint D = args.D;
  const ulong row = ulong(ids[t]) * ulong(D);  // the id is in [0, V): the front door checked it
  const uint base = group.x * group_threads * kEmbeddingPerThread + lidx;
  for (uint e = 0; e < kEmbeddingPerThread; ++e) {
    const uint d = base + e * group_threads;
    if (d < D) out[ulong(t) * D + d] = store_as<OS>(load_f32(table[row + d]) * args.scale);
  }
}

#define MB_EMBEDDING_KERNEL(td, TS, id, IS, od, OS)                                                                \
  kernel void embedding_gather_##td##_##id##_##od(DEVICE_PTR(const TS) table [[buffer(0)]],                        \
                                                  DEVICE_PTR(const IS) ids [[buffer(1)]],                          \
                                                  DEVICE_PTR(OS) out [[buffer(2)]],                                \
                                                  constant EmbeddingArgs& args [[buffer(3)]], MB_THREAD_POSITION) { \
    gather_body<TS, IS, OS>(table, ids, out, args, tgid.xy, lidx, tg_size.x);                                     \
  }                                                                                                               \
  MB_REGISTER_KERNEL(embedding_gather_##td##_##id##_##od)

#define MB_EMBEDDING_KERNELS_T(td, TS)                   \
  MB_EMBEDDING_KERNEL(td, TS, i32, int, f32, float)      \
  MB_EMBEDDING_KERNEL(td, TS, i32, int, bf16, bf16_t)    \
  MB_EMBEDDING_KERNEL(td, TS, i64, long, f32, float)     \
  MB_EMBEDDING_KERNEL(td, TS, i64, long, bf16, bf16_t)

MB_EMBEDDING_KERNELS_T(f32, float)
MB_EMBEDDING_KERNELS_T(bf16, bf16_t)
MB_EMBEDDING_KERNELS_T(f16, half)
