// Kernel choice, grids and argument binding for the attention kernels (metal/attention.metal).
// Written only against KernelLauncher: the same code drives metal-sim and (later) Metal.
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "backend/metal/attention_dispatch.h"
#include "core/errors.h"
#include "kernel_args.h"

namespace mb::metal {

namespace {

static_assert(sizeof(AttentionArgs) == 20 * 4 && sizeof(AttentionMergeArgs) == 3 * 4 && sizeof(LocalAttentionArgs) == 5 * 4,
              "kernel_args.h layout changed");

// Every attention kernel runs 4 simdgroups of 32 threads (attention.metal: kSimdgroups).
constexpr uint32_t kThreadsPerGroup = 128;
// Up to this many queries use the decode kernel (parallel over heads and key chunks); more use prefill.
constexpr int64_t kDecodeMaxQueries = 4;
// Decode key chunks: at least 128 keys each (below that the merge costs more than the split gains),
// at most 64 of them (attention.metal: kMaxChunks).
constexpr int64_t kMinChunkKeys = 128;
constexpr int64_t kMaxChunks = 64;
constexpr int64_t kPartialHeader = 3;
constexpr int64_t kMaxHeadDim = 512;

// Per-head-dim kernel variant (registers sized for d <= D) and prefill rows per threadgroup.
struct Variant {
  int64_t max_d;
  int64_t prefill_rows;  // 4 simdgroups × rows per simdgroup
};
constexpr Variant kVariants[] = {{64, 32}, {128, 32}, {256, 16}, {512, 8}};

uint32_t checked_u32(int64_t n, const char* what) {
  if (n < 0 || n > int64_t(std::numeric_limits<uint32_t>::max()))
    throw DeviceError(cat("attention: ", what, " = ", n, " exceeds the Metal kernels' 32-bit index range"));
  return uint32_t(n);
}

// A [S, Hkv, d] k / v view with a unit last stride, bound as the bytes it touches (strides may be
// negative or exceed the shape: a slice of a larger cache), with its row and head strides.
struct StridedSpan {
  StridedBinding span;
  int32_t stride_s = 0, stride_h = 0;
};

StridedSpan span_of(const Tensor& t, const char* name) {
  StridedSpan sp;
  sp.span = bind_strided(t, /*writable=*/false, "attention", name);
  if (t.numel() == 0) return sp;  // nothing is read
  const int64_t i32_max = std::numeric_limits<int32_t>::max();
  if (std::abs(t.stride(0)) > i32_max || std::abs(t.stride(1)) > i32_max)
    throw DeviceError(cat("attention: ", name, " ", t.describe(), " has strides beyond the Metal kernels' 32-bit offsets"));
  sp.stride_s = int32_t(t.stride(0));
  sp.stride_h = int32_t(t.stride(1));
  return sp;
}

// An optional i32 vector, or an empty binding the kernel never reads (has_blocks = 0).

}  // namespace

void attention(KernelLauncher& L, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos,
                 const Tensor& k_pos, const Tensor* q_block, const Tensor* k_block, Tensor& out,
                 const ops::AttentionParams& p) {
  const int64_t T = q.size(0), Hq = q.size(1), d = q.size(2), S = k.size(0), Hkv = k.size(1);
  if (T == 0) return;
  if (d > kMaxHeadDim)
    throw DeviceError(cat("attention: the Metal kernels take head dims up to ", kMaxHeadDim, ", q ", q.describe(), " has ", d));
  checked_u32(T * Hq * d, "T·Hq·d");
  const Variant& var = *std::find_if(std::begin(kVariants), std::end(kVariants), [&](const Variant& x) { return d <= x.max_d; });
  const StridedSpan ks = span_of(k, "k"), vs = span_of(v, "v");

  AttentionArgs a{};
  a.T = checked_u32(T, "T");
  a.Hq = checked_u32(Hq, "Hq");
  a.Hkv = checked_u32(Hkv, "Hkv");
  a.group = uint32_t(Hq / Hkv);
  a.d = uint32_t(d);
  a.S = checked_u32(S, "S");
  a.k_offset = uint32_t(ks.span.offset);
  a.k_stride_s = ks.stride_s;
  a.k_stride_h = ks.stride_h;
  a.v_offset = uint32_t(vs.span.offset);
  a.v_stride_s = vs.stride_s;
  a.v_stride_h = vs.stride_h;
  a.scale = p.scale;
  a.softcap = p.softcap;
  a.causal = p.causal ? 1 : 0;
  // A window of 2^31 or more excludes nothing between i32 positions: unlimited.
  a.window = p.window >= (int64_t(1) << 31) ? 0 : uint32_t(p.window);
  a.block_overrides_window = p.block_overrides_window ? 1 : 0;
  a.has_blocks = q_block ? 1 : 0;

  std::vector<BufferBinding> inputs = {BufferBinding::input(q), ks.span.binding, vs.span.binding, BufferBinding::input(q_pos),
                                       BufferBinding::input(k_pos), BufferBinding::optional_input(q_block), BufferBinding::optional_input(k_block),
                                       BufferBinding::output(out)};
  const std::string dsuffix = cat("_d", var.max_d, "_f32");

  if (T > kDecodeMaxQueries) {
    // Prefill: R consecutive (query, head-of-group) rows of one kv head per threadgroup.
    a.chunk = a.S;
    a.n_chunks = 1;
    Dispatch pre;
    pre.kernel = "attention_prefill" + dsuffix;
    pre.buffers = inputs;
    pre.set_args(a);
    pre.grid = {checked_u32((T * a.group + var.prefill_rows - 1) / var.prefill_rows, "row blocks"), a.Hkv, 1};
    pre.group = {kThreadsPerGroup, 1, 1};
    L.dispatch(pre);
    return;
  }

  // Decode: (chunk, head, query) threadgroups; with several chunks their partials are merged.
  int64_t chunk = std::max(kMinChunkKeys, (S + kMaxChunks - 1) / kMaxChunks);
  const int64_t n_chunks = std::max<int64_t>(1, (S + chunk - 1) / chunk);
  a.chunk = uint32_t(chunk);
  a.n_chunks = uint32_t(n_chunks);
  Tensor scratch;
  Dispatch dec;
  dec.kernel = "attention_decode" + dsuffix;
  dec.buffers = inputs;
  if (n_chunks > 1) {
    // Partials: [T, Hq, C, d + 3] f32 (seen, max, sum, unnormalised acc[d]).
    scratch = Tensor::empty(DType::F32, {T, Hq, n_chunks, d + kPartialHeader});
    checked_u32(scratch.numel(), "decode partials");
    dec.buffers.push_back(BufferBinding::output(scratch));
  } else {
    dec.buffers.push_back(BufferBinding{nullptr, 0, true, nullptr});  // the kernel writes out directly
  }
  dec.set_args(a);
  dec.grid = {a.n_chunks, a.Hq, a.T};
  dec.group = {kThreadsPerGroup, 1, 1};
  L.dispatch(dec);
  if (n_chunks > 1) {
    Dispatch merge;
    merge.kernel = "attention_merge_f32";
    merge.buffers = {BufferBinding::input(scratch), BufferBinding::output(out)};
    merge.set_args(AttentionMergeArgs{uint32_t(T * Hq), uint32_t(d), uint32_t(n_chunks)});
    merge.grid = {uint32_t(T * Hq), 1, 1};
    merge.group = {kThreadsPerGroup, 1, 1};
    L.dispatch(merge);
  }
}

void local_attention(KernelLauncher& L, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& rel,
                     float softcap, Tensor& out) {
  const int64_t T = q.size(0), H = q.size(1), d = q.size(2), W = rel.size(0);
  if (out.numel() == 0) return;
  if (W > kLocalMaxWindow)
    throw DeviceError(cat("local_attention: a window of ", W, " keys exceeds the Metal kernel's ", uint32_t(kLocalMaxWindow)));
  checked_u32(q.numel(), "q elements");
  checked_u32(rel.numel(), "rel elements");
  Dispatch dp;
  dp.kernel = "local_attention_f32";
  dp.buffers = {BufferBinding::input(q), BufferBinding::input(k), BufferBinding::input(v), BufferBinding::input(rel),
                BufferBinding::output(out)};
  dp.set_args(LocalAttentionArgs{uint32_t(T), uint32_t(H), uint32_t(d), uint32_t(W), softcap});
  const int64_t rows_per_group = kThreadsPerGroup / 32;  // one simdgroup per (query, head) row
  dp.grid = {checked_u32((T * H + rows_per_group - 1) / rows_per_group, "row groups"), 1, 1};
  dp.group = {kThreadsPerGroup, 1, 1};
  L.dispatch(dp);
}

}  // namespace mb::metal
