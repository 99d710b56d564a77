// Mixture-of-experts routing kernels (ops/moe.h). Same f32 operations in the same order as the CPU
// backend (csrc/backend/cpu/moe.cpp), so results are bit-identical.
//
// route_weights_f32: one thread per token row t: sum = Σ_j w[t, j] in j order, then
//   v[j] = w[t, j] / sum · scale[ids[t, j]] written with the ids to out_w / out_ids and the row
//   insertion-sorted by id (K is small); an id outside [0, E) (possible only if the router's ids were
//   corrupted: they are computed on the device and not checked by the host) gets weight 0.
//   Bytes per call (T rows of K): reads T*K*8 (w, ids) + up to E*4 (scale), writes T*K*8.
//
// index_add_f32: one thread per column c of out [R, D]; it walks i = 0..n-1 in order and adds
//   weight[i] · src[i, c] (product rounded to f32 first) to out[index[i], c], so a row named twice
//   accumulates in index order and no two threads touch the same element (no atomics).
//   Bytes per call: reads n*D*4 (src) + n*4 (index) + n*4 (weight, if any) + n*D*4 (out rows read),
//   writes n*D*4 (out rows).
// Dispatch: csrc/backend/metal/moe_dispatch.cpp.
#include "kernel_common.h"
#include "kernel_args.h"

kernel void route_weights_f32(DEVICE_PTR(const float) w [[buffer(0)]], DEVICE_PTR(const int) ids [[buffer(1)]],
                              DEVICE_PTR(const float) scale [[buffer(2)]], DEVICE_PTR(float) out_w [[buffer(3)]],
                              DEVICE_PTR(int) out_ids [[buffer(4)]], constant RouteWeightsArgs& args [[buffer(5)]],
                              MB_THREAD_POSITION) {
  const uint t = tid.x;
  if (t >= args.T) return;
  const ulong row = ulong(t) * args.K;
  float sum = 0.0f;
  for (uint j = 0; j < args.K; ++j) sum += w[row + j];
  for (uint j = 0; j < args.K; ++j) {  // element j is read before it is written (in place is allowed)
    const int e = ids[row + j];
    const bool valid = e >= 0 && uint(e) < args.E;
    out_w[row + j] = valid ? w[row + j] / sum * scale[valid ? e : 0] : 0.0f;
    out_ids[row + j] = e;
  }
  for (uint j = 1; j < args.K; ++j) {  // insertion sort of the row by expert id
    const float v = out_w[row + j];
    const int e = out_ids[row + j];
    uint i = j;
    for (; i > 0 && out_ids[row + i - 1] > e; --i) {
      out_w[row + i] = out_w[row + i - 1];
      out_ids[row + i] = out_ids[row + i - 1];
    }
    out_w[row + i] = v;
    out_ids[row + i] = e;
  }
}
MB_REGISTER_KERNEL(route_weights_f32)

kernel void index_add_f32(DEVICE_PTR(const int) index [[buffer(0)]], DEVICE_PTR(const float) src [[buffer(1)]],
                          DEVICE_PTR(const float) weight [[buffer(2)]], DEVICE_PTR(float) out [[buffer(3)]],
                          constant IndexAddArgs& args [[buffer(4)]], MB_THREAD_POSITION) {
  const uint c = tid.x;
  if (c >= args.D) return;
  for (uint i = 0; i < args.n; ++i) {
    const ulong dst = ulong(index[i]) * args.D + c;  // index[i] in [0, R): the front door checked it
    const float v = src[ulong(i) * args.D + c];
    if (args.has_weight != 0u) {
      const float product = v * weight[i];  // rounded to f32 before the add (fast math is off)
      out[dst] += product;
    } else {
      out[dst] += v;
    }
  }
}
MB_REGISTER_KERNEL(index_add_f32)
