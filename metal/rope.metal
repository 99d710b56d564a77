// Rotary position embeddings (ops/rope.h), storage f32 / f16 / bf16, positions i32 / i64. Every step as
// the CPU backend (csrc/backend/cpu/rope.cpp) and HF in f32: ang = f32(pos) · inv_freq[i] (one f32
// multiply), c = precise::cos(ang), s = precise::sin(ang), then (a, b) → (a·c − b·s, b·c + a·s).
//
// Work split: one thread per rotated pair (i, i + n) of a token, applied to every head of that token
// (cos / sin are computed once per (token, pair), not once per head). A token's pairs span
// args.groups_per_token threadgroups of T threads; grid.x = tokens · groups_per_token. Thread j of a
// token reads x[t, h, j] and x[t, h, j + n] for h = 0..H−1: neighbouring threads touch neighbouring
// elements (coalesced). No threadgroup memory or barriers: there is nothing to share.
// x may be strided ([T, H, d] with a contiguous last dim, args.x_stride_*, offsets into the bound span);
// y is contiguous. A pair is read before it is written by the same thread: y == x is safe.
//
// Kernels and bytes per call (T tokens, H heads, head dim d, S bytes per element, P = 4 / 8 bytes per
// position):
//   rope_p<32|64>_<S>     1-D half-split rope, n = len(inv_freq) pairs, dims [2n, d) copied unchanged
//                         (args.copy_tail = 0 in place: those bytes are already right). Reads T·H·d·S
//                         (x; T·H·2n·S in place) + T·P (positions) + n·4 (inv_freq, cache-resident),
//                         writes the same T·H·d·S (T·H·2n·S in place) of y.
//   rope_2d_p<32|64>_<S>  vision axial rope, q = d/4 pairs per half: dims [0, d/2) rotate with
//                         positions[t, 0], dims [d/2, d) with positions[t, 1]. Reads T·H·d·S (x) +
//                         2·T·P (positions) + q·4 (inv_freq), writes T·H·d·S (y).
#include "kernel_common.h"
#include "kernel_args.h"

namespace rope_family {

// (first, second) ← (a·c − b·s, b·c + a·s) for the pair at offsets (xi, xi + n) of x and (yi, yi + n) of y.
template <typename S>
inline void rotate_pair(DEVICE_PTR(const S) x, DEVICE_PTR(S) y, int xi, uint yi, uint n, float c, float s) {
  const float a = load_f32(x[xi]), b = load_f32(x[xi + int(n)]);
  y[yi] = store_as<S>(a * c - b * s);
  y[yi + n] = store_as<S>(b * c + a * s);
}

// The position of token t (component k) as torch's position_ids.float(): round to nearest f32.
template <typename I>
inline float position_f32(DEVICE_PTR(const I) pos, constant RopeArgs& args, uint t, uint k) {
  return float(pos[args.pos_offset + int(t) * args.pos_stride_t + int(k) * args.pos_stride_k]);
}

template <typename S, typename I>
inline void rope_body(DEVICE_PTR(const S) x, DEVICE_PTR(const I) pos, DEVICE_PTR(const float) inv_freq,
                      DEVICE_PTR(S) y, constant RopeArgs& args, uint group, uint lidx, uint group_threads) {
  const uint t = group / args.groups_per_token;
  const uint j = (group % args.groups_per_token) * group_threads + lidx;
  if (t >= args.tokens || j >= args.items) return;  // no barriers below: an early return is fine
  const uint n = args.pairs, d = args.head_dim;
  const int x_token = args.x_offset + int(t) * args.x_stride_t;
  const uint y_token = t * args.heads * d;

  if (j < n) {
    const float ang = position_f32(pos, args, t, 0) * inv_freq[j];
    const float c = precise::cos(ang), s = precise::sin(ang);
    for (uint h = 0; h < args.heads; ++h)
      rotate_pair<S>(x, y, x_token + int(h) * args.x_stride_h + int(j), y_token + h * d + j, n, c, s);
  }
  // Dims [2n, d) pass through unchanged (raw copy of the stored value).
  if (args.copy_tail && j < d - 2 * n) {
    for (uint h = 0; h < args.heads; ++h)
      y[y_token + h * d + 2 * n + j] = x[x_token + int(h) * args.x_stride_h + int(2 * n + j)];
  }
}

template <typename S, typename I>
inline void rope_2d_body(DEVICE_PTR(const S) x, DEVICE_PTR(const I) pos, DEVICE_PTR(const float) inv_freq,
                         DEVICE_PTR(S) y, constant RopeArgs& args, uint group, uint lidx, uint group_threads) {
  const uint t = group / args.groups_per_token;
  const uint j = (group % args.groups_per_token) * group_threads + lidx;
  if (t >= args.tokens || j >= args.items) return;  // items = 2q: one thread per pair of either half
  const uint q = args.pairs, d = args.head_dim;
  const uint k = j / q;              // 0: dims [0, d/2) with the x coordinate; 1: dims [d/2, d) with y
  const uint i = j - k * q;          // pair (i, i + q) inside that half
  const uint chunk = k * (2 * q);
  const int x_token = args.x_offset + int(t) * args.x_stride_t;
  const uint y_token = t * args.heads * d;

  const float ang = position_f32(pos, args, t, k) * inv_freq[i];
  const float c = precise::cos(ang), s = precise::sin(ang);
  for (uint h = 0; h < args.heads; ++h)
    rotate_pair<S>(x, y, x_token + int(h) * args.x_stride_h + int(chunk + i), y_token + h * d + chunk + i, q, c, s);
}

}  // namespace rope_family

#define MB_ROPE_KERNEL(op, body, pvariant, I, dtype, S)                                                                \
  kernel void op##_##pvariant##_##dtype(DEVICE_PTR(const S) x [[buffer(0)]], DEVICE_PTR(const I) pos [[buffer(1)]],    \
                                        DEVICE_PTR(const float) inv_freq [[buffer(2)]], DEVICE_PTR(S) y [[buffer(3)]], \
                                        constant RopeArgs& args [[buffer(4)]], MB_THREAD_POSITION) {                   \
    body<S, I>(x, pos, inv_freq, y, args, tgid.x, lidx, tg_size.x);                                                    \
  }                                                                                                                    \
  MB_REGISTER_KERNEL(op##_##pvariant##_##dtype)

#define MB_ROPE_KERNELS(op, body)                  \
  MB_ROPE_KERNEL(op, body, p32, int, f32, float)   \
  MB_ROPE_KERNEL(op, body, p32, int, f16, half)    \
  MB_ROPE_KERNEL(op, body, p32, int, bf16, bf16_t) \
  MB_ROPE_KERNEL(op, body, p64, long, f32, float)  \
  MB_ROPE_KERNEL(op, body, p64, long, f16, half)   \
  MB_ROPE_KERNEL(op, body, p64, long, bf16, bf16_t)

MB_ROPE_KERNELS(rope, rope_family::rope_body)
MB_ROPE_KERNELS(rope_2d, rope_family::rope_2d_body)
