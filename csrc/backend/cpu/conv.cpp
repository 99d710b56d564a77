// Convolution kernels. Reference: one scalar loop nest per output element. Fast: direct (im2col-free)
// convolution over tasks of (8 output channels × a block of output rows); each input row is split into
// its column phases once, so every tap is a contiguous, vectorised row update; AVX2 build of the same
// code where the CPU has it.
//
// Both kernels accumulate every output element over the taps in the same order (ci, i, j), starting
// from 0, and add the bias last, so they differ only by FMA contraction in the AVX2 build.
#include "backend/cpu/conv.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/dispatch.h"
#include "core/thread_pool.h"

namespace mb::cpu {

// One float of a small f32 / bf16 / f16 tensor (weights, bias) by flat index.
static float load_any(const Tensor& t, int64_t i) {
  return dispatch_float(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    return load_f32(t.data_as<const T>() + i);
  });
}

// The whole tensor as f32 (weights are small next to the activations they touch).
static std::vector<float> to_f32_vector(const Tensor& t) {
  std::vector<float> v(size_t(t.numel()));
  dispatch_float(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.data_as<const T>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = load_f32(p + i);
  });
  return v;
}

// ---------------------------------------------------------------------------------------------- conv2d

void conv2d_ref(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, const ops::Conv2dParams& p) {
  const int64_t B = x.size(0), Cin = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Cout = w.size(0), kh = w.size(2), kw = w.size(3);
  const int64_t Ho = out.size(2), Wo = out.size(3);
  const float* xs = x.data_as<const float>();  // x: [B, Cin, H, W]
  float* ys = out.data_as<float>();             // out: [B, Cout, Ho, Wo]
  for (int64_t b = 0; b < B; ++b)
    for (int64_t co = 0; co < Cout; ++co)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          float acc = 0.f;
          for (int64_t ci = 0; ci < Cin; ++ci)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ih = oh * p.stride_h - p.pad_h + i, iw = ow * p.stride_w - p.pad_w + j;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;  // zero padding
                acc += load_any(w, ((co * Cin + ci) * kh + i) * kw + j) * xs[((b * Cin + ci) * H + ih) * W + iw];
              }
          ys[((b * Cout + co) * Ho + oh) * Wo + ow] = acc + (bias.defined() ? load_any(bias, co) : 0.f);
        }
}

namespace {

struct Conv2dJob {
  const float* x;     // [B, Cin, H, W]
  const float* w;     // [Cout, Cin, kh, kw], converted to f32
  const float* bias;  // [Cout] or nullptr
  float* out;         // [B, Cout, Ho, Wo]
  int64_t B, Cin, H, W, Cout, kh, kw, Ho, Wo;
  ops::Conv2dParams p;
  int64_t phase_len;  // ceil(W / stride_w): length of one column phase of an input row
};

// Output channels computed together: they share each (deinterleaved) input row.
constexpr int64_t kConvChannelBlock = 8;

// o[k] += wv · x[k] for k in [0, n): contiguous, vectorised.
inline __attribute__((always_inline)) void tap_row(float* __restrict o, const float* __restrict x, float wv, int64_t n) {
  for (int64_t k = 0; k < n; ++k) o[k] += wv * x[k];
}

// Channels [co0, co1) × output rows [oh0, oh1) of image b. `phases` holds stride_w · phase_len floats.
// With a column stride s, input row ih is split into s phases (phase r holds columns r, r + s, ...), so
// every tap reads a contiguous run: column ow·s − pw + j lives in phase (j − pw) mod s at ow + ⌊(j − pw)/s⌋.
inline __attribute__((always_inline)) void conv2d_block_impl(const Conv2dJob& J, int64_t b, int64_t co0, int64_t co1,
                                                             int64_t oh0, int64_t oh1, float* phases) {
  const int64_t sh = J.p.stride_h, sw = J.p.stride_w, ph = J.p.pad_h, pw = J.p.pad_w;
  const int64_t rows = oh1 - oh0, plane = J.Ho * J.Wo;
  for (int64_t co = co0; co < co1; ++co) {
    float* o = J.out + ((b * J.Cout + co) * J.Ho + oh0) * J.Wo;
    std::fill(o, o + rows * J.Wo, 0.f);
  }
  // Per tap column j: the valid output columns [lo, hi) (0 <= ow·sw − pw + j < W) and where they read.
  int64_t lo[64], hi[64], phase_of[64], shift[64];
  const bool small_kernel = J.kw <= 64;
  auto tap_range = [&](int64_t j, int64_t* l, int64_t* h, int64_t* r, int64_t* base) {
    const int64_t q = j - pw;
    *l = q < 0 ? std::min(J.Wo, (-q + sw - 1) / sw) : int64_t(0);
    const int64_t last = J.W - 1 - q;  // largest allowed ow·sw
    *h = last < 0 ? int64_t(0) : std::min(J.Wo, last / sw + 1);
    *r = ((q % sw) + sw) % sw;
    *base = (q - *r) / sw;
  };
  if (small_kernel)
    for (int64_t j = 0; j < J.kw; ++j) tap_range(j, &lo[j], &hi[j], &phase_of[j], &shift[j]);
  for (int64_t ci = 0; ci < J.Cin; ++ci) {
    const float* xp = J.x + (b * J.Cin + ci) * J.H * J.W;
    for (int64_t i = 0; i < J.kh; ++i) {
      for (int64_t oh = oh0; oh < oh1; ++oh) {
        const int64_t ih = oh * sh - ph + i;
        if (ih < 0 || ih >= J.H) continue;  // zero padding rows
        const float* xr = xp + ih * J.W;
        const float* src = xr;
        if (sw > 1) {  // deinterleave the row into its column phases
          for (int64_t r = 0; r < sw; ++r) {
            float* dst = phases + r * J.phase_len;
            for (int64_t k = 0, c = r; c < J.W; ++k, c += sw) dst[k] = xr[c];
          }
          src = phases;
        }
        for (int64_t co = co0; co < co1; ++co) {
          float* orow = J.out + (b * J.Cout + co) * plane + oh * J.Wo;
          const float* wrow = J.w + ((co * J.Cin + ci) * J.kh + i) * J.kw;
          for (int64_t j = 0; j < J.kw; ++j) {
            int64_t l, h, r, base;
            if (small_kernel) l = lo[j], h = hi[j], r = phase_of[j], base = shift[j];
            else tap_range(j, &l, &h, &r, &base);
            if (l >= h) continue;
            tap_row(orow + l, src + r * J.phase_len + l + base, wrow[j], h - l);
          }
        }
      }
    }
  }
  if (J.bias)
    for (int64_t co = co0; co < co1; ++co) {
      float* o = J.out + ((b * J.Cout + co) * J.Ho + oh0) * J.Wo;
      const float bv = J.bias[co];
      for (int64_t k = 0; k < rows * J.Wo; ++k) o[k] = o[k] + bv;
    }
}

void conv2d_block_portable(const Conv2dJob& J, int64_t b, int64_t co0, int64_t co1, int64_t oh0, int64_t oh1,
                           float* phases) {
  conv2d_block_impl(J, b, co0, co1, oh0, oh1, phases);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void conv2d_block_avx2(const Conv2dJob& J, int64_t b, int64_t co0, int64_t co1,
                                                           int64_t oh0, int64_t oh1, float* phases) {
  conv2d_block_impl(J, b, co0, co1, oh0, oh1, phases);
}
#endif

using Conv2dBlockFn = void (*)(const Conv2dJob&, int64_t, int64_t, int64_t, int64_t, int64_t, float*);

Conv2dBlockFn pick_conv2d_block() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return conv2d_block_avx2;
#endif
  return conv2d_block_portable;
}

}  // namespace

void conv2d_fast(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, const ops::Conv2dParams& p) {
  if (out.numel() == 0) return;
  const std::vector<float> wf = to_f32_vector(w);
  const std::vector<float> bf = bias.defined() ? to_f32_vector(bias) : std::vector<float>();
  const Conv2dJob J{x.data_as<const float>(), wf.data(), bias.defined() ? bf.data() : nullptr, out.data_as<float>(),
                    x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3), out.size(2),
                    out.size(3), p, (x.size(3) + p.stride_w - 1) / p.stride_w};
  // A task: up to 8 output channels × a block of output rows of about 8192 floats in all, so the block
  // stays in cache while every input row and tap updates it.
  const int64_t groups = (J.Cout + kConvChannelBlock - 1) / kConvChannelBlock;
  const int64_t ch = std::min(J.Cout, kConvChannelBlock);
  const int64_t rows_per_task = std::clamp<int64_t>(8192 / (ch * J.Wo), 1, J.Ho);
  const int64_t blocks = (J.Ho + rows_per_task - 1) / rows_per_task;
  const int64_t tasks = J.B * groups * blocks;
  const int64_t macs_per_task = ch * rows_per_task * J.Wo * J.Cin * J.kh * J.kw;
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(macs_per_task, 1));
  const Conv2dBlockFn block = pick_conv2d_block();
  parallel_for(tasks, grain, [&](int64_t t0, int64_t t1) {
    std::vector<float> phases(size_t(p.stride_w * J.phase_len));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t blk = t % blocks, g = (t / blocks) % groups, b = t / (blocks * groups);
      const int64_t oh0 = blk * rows_per_task, oh1 = std::min(J.Ho, oh0 + rows_per_task);
      const int64_t co0 = g * kConvChannelBlock, co1 = std::min(J.Cout, co0 + kConvChannelBlock);
      block(J, b, co0, co1, oh0, oh1, phases.data());
    }
  });
}

// ------------------------------------------------------------------------------ depthwise causal conv1d

void depthwise_conv1d_causal_ref(const Tensor& x, const Tensor& w, Tensor& out) {
  const int64_t T = x.size(0), C = x.size(1), K = w.size(2);
  const float* xs = x.data_as<const float>();  // x: [T, C]
  float* ys = out.data_as<float>();             // out: [T, C]
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) {
      float acc = 0.f;
      for (int64_t j = 0; j < K; ++j) {
        const int64_t r = t - (K - 1) + j;
        if (r < 0) continue;  // causal left padding reads zero
        acc += load_any(w, c * K + j) * xs[r * C + c];  // w: [C, 1, K]
      }
      ys[t * C + c] = acc;
    }
}

namespace {

// Output rows [t0, t1): for each tap j, a contiguous multiply-add over the channels.
inline __attribute__((always_inline)) void dwconv_rows_impl(const float* __restrict x, const float* __restrict wt,
                                                            float* __restrict out, int64_t C, int64_t K, int64_t t0,
                                                            int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    float* o = out + t * C;
    std::fill(o, o + C, 0.f);
    for (int64_t j = 0; j < K; ++j) {
      const int64_t r = t - (K - 1) + j;
      if (r < 0) continue;
      const float* xr = x + r * C;
      const float* wr = wt + j * C;
      for (int64_t c = 0; c < C; ++c) o[c] += wr[c] * xr[c];
    }
  }
}

void dwconv_rows_portable(const float* x, const float* wt, float* out, int64_t C, int64_t K, int64_t t0, int64_t t1) {
  dwconv_rows_impl(x, wt, out, C, K, t0, t1);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void dwconv_rows_avx2(const float* x, const float* wt, float* out, int64_t C,
                                                          int64_t K, int64_t t0, int64_t t1) {
  dwconv_rows_impl(x, wt, out, C, K, t0, t1);
}
#endif

}  // namespace

void depthwise_conv1d_causal_fast(const Tensor& x, const Tensor& w, Tensor& out) {
  const int64_t T = x.size(0), C = x.size(1), K = w.size(2);
  // Taps transposed to [K, C] in f32, so the inner loop runs over contiguous channels.
  std::vector<float> wt(size_t(K * C));
  dispatch_float(w.dtype(), [&](auto tag) {
    using Tw = decltype(tag);
    const Tw* ws = w.data_as<const Tw>();
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < K; ++j) wt[size_t(j * C + c)] = load_f32(ws + c * K + j);
  });
  auto rows = dwconv_rows_portable;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) rows = dwconv_rows_avx2;
#endif
  const float* xs = x.data_as<const float>();
  float* ys = out.data_as<float>();
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(C * K, 1));
  parallel_for(T, grain, [&](int64_t t0, int64_t t1) { rows(xs, wt.data(), ys, C, K, t0, t1); });
}

}  // namespace mb::cpu
