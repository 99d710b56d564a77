// Attention kernels (ops/attention.h), f32 storage and math, head dims d <= 512. Same contract as the CPU
// kernels (csrc/backend/cpu/attention.{h,cpp}): keys tagged with absolute positions (k_pos −1 = empty
// slot), mask from positions (causal, window, bidirectional blocks under either rule), softcap before
// masking, GQA (query head h reads kv head h / group), rows with no allowed key are zeros, masked keys
// are never read, NaN propagates (nan_max, no rescale skipped on a NaN max). k / v rows are addressed
// with element strides from the argument struct (any outer layout, contiguous last dim).
//
// Register layout shared by all kernels: a simdgroup owns a (query, head) row; lane `lane` holds the
// row's elements e = lane + 32·i, i < NE (NE = 2, 4, 8, 16 for d <= 64, 128, 256, 512: one kernel per
// size so the register arrays are sized at compile time). q·k is a per-lane partial sum + simd_sum;
// the output accumulator o[e] is updated by each lane for its own elements (coalesced row reads).
//
// Kernels (dispatch: csrc/backend/metal/attention_dispatch.cpp). Bytes per call, f32, for T queries,
// Hq query heads, Hkv kv heads (group G = Hq / Hkv), S keys, A <= S keys allowed for a query, C chunks:
//   attention_decode_d<D>_f32  grid (C, Hq, T), 128 threads. Threadgroup = one (query, head) × one
//     chunk of keys; its 4 simdgroups take keys round-robin with their own online softmax, merged in
//     threadgroup memory at the end. Reads T·Hq·d·4 (q) + T·Hq·S·(4 + 4·[blocks]) (k_pos, k_block)
//     + T·Hq·A·2·d·4 (allowed k and v rows; the G heads of a kv head re-read them, mostly from cache,
//     so DRAM traffic is ≈ T·Hkv·A·2·d·4). Writes T·Hq·d·4 (out, C == 1) or T·Hq·C·(d + 3)·4 (partials).
//   attention_merge_f32        grid (T·Hq), 128 threads. Reads T·Hq·C·(d + 3)·4, writes T·Hq·d·4.
//   attention_prefill_d<D>_f32 grid (ceil(T·G / R), Hkv), 128 threads, R = 32 / 32 / 16 / 8 rows
//     (D = 64 / 128 / 256 / 512). Threadgroup = R consecutive (query, head-of-the-group) rows of one kv
//     head; keys stream through threadgroup memory in tiles (only the rows some query of the block
//     may attend are loaded). Reads T·Hq·d·4 (q) + ceil(T·G / R)·Hkv·(S·(4 + 4·[blocks]) + A'·2·d·4)
//     (A' = keys allowed for any query of a block), writes T·Hq·d·4.
#include "kernel_common.h"
#include "kernel_args.h"

constexpr constant uint kSimdWidth = 32;
constexpr constant uint kSimdgroups = 4;           // per threadgroup: 128 threads in every kernel
constexpr constant uint kPartialHeader = 3;        // partial of one (row, chunk): [seen, max, sum, acc[d]]
constexpr constant uint kMaxChunks = 64;           // the dispatch never splits the keys into more chunks
constexpr constant uint kTileFloats = 3584;        // prefill: floats of one K (and one V) tile, 14 KiB
constexpr constant uint kMaxTileKeys = 64;         // prefill: keys per tile = min(64, 3584 / d)
constexpr constant uint kMaxBlockRows = 32;        // prefill: rows (hence queries) per threadgroup

// max that lets NaN win (a NaN logit must poison the row, not be skipped).
inline float nan_max(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

// The mask (cpu::AttentionMask). window == 0: unlimited (the dispatch maps windows >= 2^31, which
// exclude nothing for i32 positions, to 0). kp > qp − window is tested as qp − kp < window, computed
// only when qp >= kp >= 0, so it cannot overflow.
inline bool attn_allowed(int qp, int kp, int qb, int kb, constant AttentionArgs& a) {
  if (kp < 0) return false;  // empty cache slot
  const bool causal_ok = a.causal == 0 || kp <= qp;
  const bool window_ok = a.window == 0 || kp > qp || uint(qp - kp) < a.window;
  const bool same_block = qb >= 0 && qb == kb;
  if (a.block_overrides_window != 0) return (causal_ok && window_ok) || same_block;
  return (causal_ok || same_block) && window_ok;
}

// logit = softcap·tanh(scale·dot / softcap), or scale·dot without a cap.
inline float attn_logit(float dot, constant AttentionArgs& a) {
  const float s = dot * a.scale;
  return a.softcap > 0.0f ? a.softcap * precise::tanh(s / a.softcap) : s;
}

// Online softmax state of one row as one simdgroup sees it (m, l, seen are uniform across its lanes).
template <uint NE>
struct RowState {
  float o[NE];  // unnormalised Σ exp(logit − m)·v, elements lane + 32·i
  float m;      // running max of the logits
  float l;      // running Σ exp(logit − m)
  bool seen;    // any allowed key so far

  void reset() {
    for (uint i = 0; i < NE; ++i) o[i] = 0.0f;
    m = -INFINITY;
    l = 0.0f;
    seen = false;
  }

  // Adds one key with logit x (same in every lane) and value vl (the lane's elements, lane_elements), as
  // the CPU fast kernel does: rescale what was accumulated when the max changes (or becomes NaN).
  void add(float x, thread const float* vl, uint lane, uint d) {
    const float new_m = seen ? nan_max(m, x) : x;
    if (seen && !(new_m == m)) {
      const float alpha = precise::exp(m - new_m);
      l *= alpha;
      for (uint i = 0; i < NE; ++i) o[i] *= alpha;
    }
    const float p = precise::exp(x - new_m);
    l += p;
    m = new_m;
    seen = true;
    for (uint i = 0; i < NE; ++i) {
      const uint e = lane + kSimdWidth * i;
      if (e < d) o[i] += p * vl[i];
    }
  }
};

// The lane's elements of a row of d: out[i] = row[lane + 32·i] (0 past d).
template <uint NE, class Ptr>
inline void lane_elements(Ptr row, uint lane, uint d, thread float* out) {
  for (uint i = 0; i < NE; ++i) {
    const uint e = lane + kSimdWidth * i;
    out[i] = e < d ? row[e] : 0.0f;
  }
}

// q·k of the lane's elements (kl from lane_elements), summed over the simdgroup.
template <uint NE>
inline float simd_dot(thread const float* qr, thread const float* kl, uint lane, uint d) {
  float dot = 0.0f;
  for (uint i = 0; i < NE; ++i) {
    const uint e = lane + kSimdWidth * i;
    if (e < d) dot += qr[i] * kl[i];
  }
  return simd_sum(dot);
}

inline long kv_offset(uint base, int stride_s, int stride_h, uint s, uint h) {
  return long(int(base) + int(s) * stride_s + int(h) * stride_h);
}

// ---- decode: one (query t, head h) × one chunk of keys per threadgroup ----
// sg_o: [kSimdgroups][32·NE] the simdgroups' accumulators; sg_ml: [3][kSimdgroups] their (m, l, seen).
template <uint NE>
inline void decode_body(DEVICE_PTR(const float) q, DEVICE_PTR(const float) k, DEVICE_PTR(const float) v,
                        DEVICE_PTR(const int) q_pos, DEVICE_PTR(const int) k_pos, DEVICE_PTR(const int) q_block,
                        DEVICE_PTR(const int) k_block, DEVICE_PTR(float) out, DEVICE_PTR(float) partial,
                        constant AttentionArgs& a, threadgroup float* sg_o, threadgroup float* sg_ml, uint chunk,
                        uint h, uint t, uint lidx, uint threads, uint lane, uint sg) {
  const uint d = a.d, kvh = h / a.group;
  float qr[NE];
  DEVICE_PTR(const float) qrow = q + long((t * a.Hq + h) * d);
  for (uint i = 0; i < NE; ++i) {
    const uint e = lane + kSimdWidth * i;
    qr[i] = e < d ? qrow[e] : 0.0f;
  }
  const int qp = q_pos[t];
  const int qb = a.has_blocks != 0 ? q_block[t] : -1;

  RowState<NE> st;
  st.reset();
  const uint s0 = chunk * a.chunk, s1 = min(a.S, s0 + a.chunk);
  for (uint s = s0 + sg; s < s1; s += kSimdgroups) {
    const int kb = a.has_blocks != 0 ? k_block[s] : -1;
    if (!attn_allowed(qp, k_pos[s], qb, kb, a)) continue;  // uniform in the simdgroup; the row is not read
    float kl[NE], vl[NE];
    lane_elements<NE>(k + kv_offset(a.k_offset, a.k_stride_s, a.k_stride_h, s, kvh), lane, d, kl);
    const float dot = simd_dot<NE>(qr, kl, lane, d);
    lane_elements<NE>(v + kv_offset(a.v_offset, a.v_stride_s, a.v_stride_h, s, kvh), lane, d, vl);
    st.add(attn_logit(dot, a), vl, lane, d);
  }

  // Merge the simdgroups: out = Σ_c e^(m_c − M)·o_c / Σ_c e^(m_c − M)·l_c over those that saw a key.
  const uint width = kSimdWidth * NE;
  for (uint i = 0; i < NE; ++i) sg_o[sg * width + lane + kSimdWidth * i] = st.o[i];
  if (lane == 0) {
    sg_ml[sg] = st.m;
    sg_ml[kSimdgroups + sg] = st.l;
    sg_ml[2 * kSimdgroups + sg] = st.seen ? 1.0f : 0.0f;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  bool any = false;
  float M = -INFINITY;
  for (uint c = 0; c < kSimdgroups; ++c) {
    if (sg_ml[2 * kSimdgroups + c] == 0.0f) continue;
    M = any ? nan_max(M, sg_ml[c]) : sg_ml[c];
    any = true;
  }
  float w[kSimdgroups];
  float total = 0.0f;
  for (uint c = 0; c < kSimdgroups; ++c) {
    const bool seen = sg_ml[2 * kSimdgroups + c] != 0.0f;
    w[c] = seen ? precise::exp(sg_ml[c] - M) : 0.0f;
    if (seen) total += w[c] * sg_ml[kSimdgroups + c];
  }
  if (a.n_chunks == 1) {
    DEVICE_PTR(float) orow = out + long((t * a.Hq + h) * d);
    for (uint e = lidx; e < d; e += threads) {
      float acc = 0.0f;
      for (uint c = 0; c < kSimdgroups; ++c)
        if (sg_ml[2 * kSimdgroups + c] != 0.0f) acc += w[c] * sg_o[c * width + e];
      orow[e] = any ? acc / total : 0.0f;  // no allowed key: zeros
    }
  } else {
    DEVICE_PTR(float) part = partial + long(((t * a.Hq + h) * a.n_chunks + chunk) * (d + kPartialHeader));
    if (lidx == 0) {
      part[0] = any ? 1.0f : 0.0f;
      part[1] = M;
      part[2] = total;
    }
    for (uint e = lidx; e < d; e += threads) {
      float acc = 0.0f;
      for (uint c = 0; c < kSimdgroups; ++c)
        if (sg_ml[2 * kSimdgroups + c] != 0.0f) acc += w[c] * sg_o[c * width + e];
      part[kPartialHeader + e] = acc;
    }
  }
}

#define MB_ATTENTION_DECODE_KERNEL(D, NE)                                                                        \
  kernel void attention_decode_d##D##_f32(                                                                       \
      DEVICE_PTR(const float) q [[buffer(0)]], DEVICE_PTR(const float) k [[buffer(1)]],                          \
      DEVICE_PTR(const float) v [[buffer(2)]], DEVICE_PTR(const int) q_pos [[buffer(3)]],                        \
      DEVICE_PTR(const int) k_pos [[buffer(4)]], DEVICE_PTR(const int) q_block [[buffer(5)]],                    \
      DEVICE_PTR(const int) k_block [[buffer(6)]], DEVICE_PTR(float) out [[buffer(7)]],                          \
      DEVICE_PTR(float) partial [[buffer(8)]], constant AttentionArgs& args [[buffer(9)]], MB_THREAD_POSITION) { \
    MB_THREADGROUP(float, sg_o, [kSimdgroups * kSimdWidth * NE]);                                                \
    MB_THREADGROUP(float, sg_ml, [3 * kSimdgroups]);                                                             \
    decode_body<NE>(q, k, v, q_pos, k_pos, q_block, k_block, out, partial, args, sg_o, sg_ml, tgid.x, tgid.y,    \
                    tgid.z, lidx, tg_size.x, simd_lane, simd_group);                                             \
  }                                                                                                              \
  MB_REGISTER_KERNEL(attention_decode_d##D##_f32)

MB_ATTENTION_DECODE_KERNEL(64, 2)
MB_ATTENTION_DECODE_KERNEL(128, 4)
MB_ATTENTION_DECODE_KERNEL(256, 8)
MB_ATTENTION_DECODE_KERNEL(512, 16)

// ---- merge of the decode chunks: one (query, head) row per threadgroup ----
// out = Σ_c e^(m_c − M)·acc_c / Σ_c e^(m_c − M)·l_c over the chunks that saw a key (zeros if none).
kernel void attention_merge_f32(DEVICE_PTR(const float) partial [[buffer(0)]], DEVICE_PTR(float) out [[buffer(1)]],
                                constant AttentionMergeArgs& args [[buffer(2)]], MB_THREAD_POSITION) {
  MB_THREADGROUP(float, weight, [kMaxChunks]);
  const uint d = args.d, n = args.n_chunks, stride = d + kPartialHeader, row = tgid.x;
  DEVICE_PTR(const float) parts = partial + long(row * n * stride);
  bool any = false;
  float M = -INFINITY;
  for (uint c = 0; c < n; ++c) {
    if (parts[c * stride] == 0.0f) continue;
    M = any ? nan_max(M, parts[c * stride + 1]) : parts[c * stride + 1];
    any = true;
  }
  if (lidx < n) weight[lidx] = parts[lidx * stride] != 0.0f ? precise::exp(parts[lidx * stride + 1] - M) : 0.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float total = 0.0f;
  for (uint c = 0; c < n; ++c)
    if (parts[c * stride] != 0.0f) total += weight[c] * parts[c * stride + 2];
  DEVICE_PTR(float) orow = out + long(row * d);
  for (uint e = lidx; e < d; e += tg_size.x) {
    float acc = 0.0f;
    for (uint c = 0; c < n; ++c)
      if (parts[c * stride] != 0.0f) acc += weight[c] * parts[c * stride + kPartialHeader + e];
    orow[e] = any ? acc / total : 0.0f;
  }
}
MB_REGISTER_KERNEL(attention_merge_f32)

// ---- prefill: R = 4·RPS rows (t, g) of kv head kvh per threadgroup, row r = t·G + g ----
// Threadgroup memory: k_tile / v_tile [bk·d] (bk = min(64, 3584 / d) keys), tile_pos / tile_block /
// tile_need [bk] (positions, block ids, "allowed for some query of the block"), blk_pos / blk_block [R]
// (the block's queries).
template <uint NE, uint RPS>
inline void prefill_body(DEVICE_PTR(const float) q, DEVICE_PTR(const float) k, DEVICE_PTR(const float) v,
                         DEVICE_PTR(const int) q_pos, DEVICE_PTR(const int) k_pos, DEVICE_PTR(const int) q_block,
                         DEVICE_PTR(const int) k_block, DEVICE_PTR(float) out, constant AttentionArgs& a,
                         threadgroup float* k_tile, threadgroup float* v_tile, threadgroup int* tile_pos,
                         threadgroup int* tile_block, threadgroup int* tile_need, threadgroup int* blk_pos,
                         threadgroup int* blk_block, uint rblock, uint kvh, uint lidx, uint lane, uint sg) {
  const uint d = a.d, G = a.group, rows = a.T * G;
  const uint r0 = rblock * (kSimdgroups * RPS);
  const uint t_first = r0 / G, t_last = (min(r0 + kSimdgroups * RPS, rows) - 1) / G;
  const uint nq = t_last - t_first + 1;  // <= R queries
  if (lidx < nq) {
    blk_pos[lidx] = q_pos[t_first + lidx];
    blk_block[lidx] = a.has_blocks != 0 ? q_block[t_first + lidx] : -1;
  }

  // This simdgroup's rows: q in registers, online softmax state.
  float qr[RPS][NE];
  RowState<NE> st[RPS];
  int qp[RPS], qb[RPS];
  bool live[RPS];
  for (uint j = 0; j < RPS; ++j) {
    const uint r = r0 + sg * RPS + j;
    live[j] = r < rows;
    const uint t = live[j] ? r / G : 0, h = kvh * G + (live[j] ? r % G : 0);
    for (uint i = 0; i < NE; ++i) {
      const uint e = lane + kSimdWidth * i;
      qr[j][i] = live[j] && e < d ? q[long((t * a.Hq + h) * d + e)] : 0.0f;
    }
    qp[j] = live[j] ? q_pos[t] : 0;
    qb[j] = live[j] && a.has_blocks != 0 ? q_block[t] : -1;
    st[j].reset();
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  const uint bk = min(kMaxTileKeys, kTileFloats / d);
  for (uint ts = 0; ts < a.S; ts += bk) {
    const uint nk = min(bk, a.S - ts);
    // Which keys of the tile some query of the block may attend (only those rows are loaded).
    if (lidx < nk) {
      const int kp = k_pos[ts + lidx];
      const int kb = a.has_blocks != 0 ? k_block[ts + lidx] : -1;
      bool need = false;
      for (uint j = 0; j < nq && !need; ++j) need = attn_allowed(blk_pos[j], kp, blk_block[j], kb, a);
      tile_pos[lidx] = kp;
      tile_block[lidx] = kb;
      tile_need[lidx] = need ? 1 : 0;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // Coalesced tile load: simdgroup sg copies rows sg, sg + 4, ...; lanes walk the row.
    for (uint j = sg; j < nk; j += kSimdgroups) {
      if (tile_need[j] == 0) continue;
      DEVICE_PTR(const float) kr = k + kv_offset(a.k_offset, a.k_stride_s, a.k_stride_h, ts + j, kvh);
      DEVICE_PTR(const float) vr = v + kv_offset(a.v_offset, a.v_stride_s, a.v_stride_h, ts + j, kvh);
      for (uint e = lane; e < d; e += kSimdWidth) {
        k_tile[j * d + e] = kr[e];
        v_tile[j * d + e] = vr[e];
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint j = 0; j < nk; ++j) {
      if (tile_need[j] == 0) continue;
      const int kp = tile_pos[j], kb = tile_block[j];
      // The lane's elements of key j and of its value, read from threadgroup memory once for the RPS rows.
      float kl[NE], vl[NE];
      lane_elements<NE>(k_tile + j * d, lane, d, kl);
      lane_elements<NE>(v_tile + j * d, lane, d, vl);
      for (uint r = 0; r < RPS; ++r) {
        if (!live[r] || !attn_allowed(qp[r], kp, qb[r], kb, a)) continue;  // uniform in the simdgroup
        st[r].add(attn_logit(simd_dot<NE>(qr[r], kl, lane, d), a), vl, lane, d);
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);  // the next tile overwrites k_tile / v_tile
  }

  for (uint j = 0; j < RPS; ++j) {
    if (!live[j]) continue;
    const uint r = r0 + sg * RPS + j, t = r / G, h = kvh * G + r % G;
    DEVICE_PTR(float) orow = out + long((t * a.Hq + h) * d);
    for (uint i = 0; i < NE; ++i) {
      const uint e = lane + kSimdWidth * i;
      if (e < d) orow[e] = st[j].seen ? st[j].o[i] / st[j].l : 0.0f;  // no allowed key: zeros
    }
  }
}

#define MB_ATTENTION_PREFILL_KERNEL(D, NE, RPS)                                                                  \
  kernel void attention_prefill_d##D##_f32(                                                                      \
      DEVICE_PTR(const float) q [[buffer(0)]], DEVICE_PTR(const float) k [[buffer(1)]],                          \
      DEVICE_PTR(const float) v [[buffer(2)]], DEVICE_PTR(const int) q_pos [[buffer(3)]],                        \
      DEVICE_PTR(const int) k_pos [[buffer(4)]], DEVICE_PTR(const int) q_block [[buffer(5)]],                    \
      DEVICE_PTR(const int) k_block [[buffer(6)]], DEVICE_PTR(float) out [[buffer(7)]],                          \
      constant AttentionArgs& args [[buffer(8)]], MB_THREAD_POSITION) {                                          \
    MB_THREADGROUP(float, k_tile, [kTileFloats]);                                                                \
    MB_THREADGROUP(float, v_tile, [kTileFloats]);                                                                \
    MB_THREADGROUP(int, tile_pos, [kMaxTileKeys]);                                                               \
    MB_THREADGROUP(int, tile_block, [kMaxTileKeys]);                                                             \
    MB_THREADGROUP(int, tile_need, [kMaxTileKeys]);                                                              \
    MB_THREADGROUP(int, blk_pos, [kMaxBlockRows]);                                                               \
    MB_THREADGROUP(int, blk_block, [kMaxBlockRows]);                                                             \
    prefill_body<NE, RPS>(q, k, v, q_pos, k_pos, q_block, k_block, out, args, k_tile, v_tile, tile_pos,         \
                          tile_block, tile_need, blk_pos, blk_block, tgid.x, tgid.y, lidx, simd_lane, simd_group); \
  }                                                                                                              \
  MB_REGISTER_KERNEL(attention_prefill_d##D##_f32)

MB_ATTENTION_PREFILL_KERNEL(64, 2, 8)
MB_ATTENTION_PREFILL_KERNEL(128, 4, 8)
MB_ATTENTION_PREFILL_KERNEL(256, 8, 4)
MB_ATTENTION_PREFILL_KERNEL(512, 16, 2)

// ---- local attention with a relative-position key term (ops::local_attention, the audio conformer) ----
// logit(t, h, j) = cap·tanh((q·k_j + q·rel[t−j]) / cap) over the W keys max(0, t−W+1) <= j <= t; softmax;
// out = Σ p_j·v_j. A simdgroup owns one (query, head) row: lanes take elements e = lane + 32·i, the two
// dot products are per-lane partials + simd_sum, and the W <= kLocalMaxWindow logits sit in each lane
// (uniform values). Grid (ceil(T·H / 4)), 128 threads.
// Bytes per call: reads T·H·d·4 (q) + T·H·n·3·d·4 (the k, rel and v rows of n <= W keys, mostly from
// cache: DRAM traffic ≈ 3·T·H·d·4 + W·H·d·4), writes T·H·d·4 (out).
kernel void local_attention_f32(DEVICE_PTR(const float) q [[buffer(0)]], DEVICE_PTR(const float) k [[buffer(1)]],
                                DEVICE_PTR(const float) v [[buffer(2)]], DEVICE_PTR(const float) rel [[buffer(3)]],
                                DEVICE_PTR(float) out [[buffer(4)]], constant LocalAttentionArgs& args [[buffer(5)]],
                                MB_THREAD_POSITION) {
  const uint row = tgid.x * kSimdgroups + simd_group;  // uniform within a simdgroup
  if (row >= args.t * args.h) return;
  const uint t = row / args.h, h = row - t * args.h, d = args.d;
  const uint first = t + 1 > args.w ? t + 1 - args.w : 0, n = t - first + 1;
  DEVICE_PTR(const float) qr = q + long(row) * long(d);
  float w[kLocalMaxWindow];
  float m = 0.0f;
  for (uint i = 0; i < n; ++i) {
    const uint j = first + i;
    DEVICE_PTR(const float) kr = k + long(j * args.h + h) * long(d);
    DEVICE_PTR(const float) rr = rel + long((t - j) * args.h + h) * long(d);
    float ac = 0.0f, bd = 0.0f;
    for (uint e = simd_lane; e < d; e += kSimdWidth) {
      ac += qr[e] * kr[e];
      bd += qr[e] * rr[e];
    }
    const float2 sums = simd_sum(float2(ac, bd));  // both sums in one exchange
    const float x = sums.x + sums.y;
    w[i] = args.softcap > 0.0f ? args.softcap * precise::tanh(x / args.softcap) : x;
    m = i == 0 ? w[i] : nan_max(m, w[i]);
  }
  float sum = 0.0f;
  for (uint i = 0; i < n; ++i) {
    w[i] = precise::exp(w[i] - m);
    sum += w[i];
  }
  const float inv = 1.0f / sum;
  for (uint e = simd_lane; e < d; e += kSimdWidth) {
    float acc = 0.0f;
    for (uint i = 0; i < n; ++i) acc += (w[i] * inv) * v[long((first + i) * args.h + h) * long(d) + e];
    out[long(row) * long(d) + e] = acc;
  }
}
MB_REGISTER_KERNEL(local_attention_f32)
