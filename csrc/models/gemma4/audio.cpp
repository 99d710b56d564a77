#include "models/gemma4/audio.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/errors.h"
#include "models/gemma4/encoder_ops.h"
#include "ops/attention.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/shape.h"
#include "ops/sync.h"
#include "runtime/measure.h"
#include "runtime/trace.h"

namespace mb::gemma4 {

namespace {

void visit_ffw(const WeightScope& s, AudioFeedForwardWeights& f, const std::string& name, int64_t Hd, bool clip) {
  visit_clippable(s, f.ffw_layer_1, name + ".ffw_layer_1", {4 * Hd, Hd}, clip);
  visit_clippable(s, f.ffw_layer_2, name + ".ffw_layer_2", {Hd, 4 * Hd}, clip);
  s.f32(f.pre_layer_norm, name + ".pre_layer_norm.weight", {Hd});
  s.f32(f.post_layer_norm, name + ".post_layer_norm.weight", {Hd});
}

}  // namespace

void visit_weights(const AudioConfig& a, int64_t text_hidden, AudioWeights& w, const WeightScope& tower,
                   const WeightScope& embedder) {
  const int64_t Hd = a.hidden_size, c0 = a.subsampling_conv_channels[0], c1 = a.subsampling_conv_channels[1];
  const bool clip = a.use_clipped_linears;
  const WeightScope sub = tower.at("subsample_conv_projection.", -1);
  sub.tensor(w.layer0_conv, "layer0.conv.weight", {c0, 1, 3, 3});
  sub.f32(w.layer0_norm, "layer0.norm.weight", {c0});
  sub.tensor(w.layer1_conv, "layer1.conv.weight", {c1, c0, 3, 3});
  sub.f32(w.layer1_norm, "layer1.norm.weight", {c1});
  // transformers sizes the input projection from channels[0] (it equals the 128 mel bins), spec §4.2
  sub.tensor(w.input_proj_linear, "input_proj_linear.weight", {Hd, (c0 / 4) * c1});
  w.layers.resize(size_t(a.num_hidden_layers));
  for (int64_t i = 0; i < a.num_hidden_layers; ++i) {
    AudioLayerWeights& lw = w.layers[size_t(i)];
    const WeightScope s = tower.at(cat("layers.", i, "."), i);
    visit_ffw(s, lw.feed_forward1, "feed_forward1", Hd, clip);
    visit_ffw(s, lw.feed_forward2, "feed_forward2", Hd, clip);
    visit_clippable(s, lw.q_proj, "self_attn.q_proj", {Hd, Hd}, clip);
    visit_clippable(s, lw.k_proj, "self_attn.k_proj", {Hd, Hd}, clip);
    visit_clippable(s, lw.v_proj, "self_attn.v_proj", {Hd, Hd}, clip);
    visit_clippable(s, lw.post, "self_attn.post", {Hd, Hd}, clip);
    s.tensor(lw.relative_k_proj, "self_attn.relative_k_proj.weight", {Hd, Hd});
    s.f32(lw.per_dim_scale, "self_attn.per_dim_scale", {Hd / a.num_attention_heads});
    visit_clippable(s, lw.linear_start, "lconv1d.linear_start", {2 * Hd, Hd}, clip);
    visit_clippable(s, lw.linear_end, "lconv1d.linear_end", {Hd, Hd}, clip);
    s.tensor(lw.depthwise_conv1d, "lconv1d.depthwise_conv1d.weight", {Hd, 1, a.conv_kernel_size});
    s.f32(lw.lconv_pre_layer_norm, "lconv1d.pre_layer_norm.weight", {Hd});
    s.f32(lw.conv_norm, "lconv1d.conv_norm.weight", {Hd});
    s.f32(lw.norm_pre_attn, "norm_pre_attn.weight", {Hd});
    s.f32(lw.norm_post_attn, "norm_post_attn.weight", {Hd});
    s.f32(lw.norm_out, "norm_out.weight", {Hd});
  }
  tower.tensor(w.output_proj_weight, "output_proj.weight", {a.output_proj_dims, Hd});
  tower.tensor(w.output_proj_bias, "output_proj.bias", {a.output_proj_dims});
  embedder.tensor(w.embedding_projection, "embedding_projection.weight", {text_hidden, a.output_proj_dims});
}


using runtime::name_intermediate;

int64_t audio_tokens_for_frames(int64_t valid_frames) {
  const int64_t half = (valid_frames + 1) / 2;
  return (half + 1) / 2;
}

AudioTower::AudioTower(const AudioConfig& cfg, const AudioWeights& w, Exec exec) : cfg_(cfg), w_(w), ex_(exec) {
  const int64_t Hd = cfg_.hidden_size, nh = cfg_.num_attention_heads, hd = Hd / nh;
  if (cfg_.attention_context_right != 0)
    throw ConfigError(cat("audio_config.attention_context_right = ", cfg_.attention_context_right,
                          ": only causal audio attention (0, as every released checkpoint) is implemented"));
  window_ = cfg_.attention_context_left - 1;  // transformers' mask: 0 <= i − j < context_left − 1
  const int64_t context = cfg_.attention_chunk_size + window_;
  if (window_ < 1 || window_ - 1 > context / 2)
    throw ConfigError(cat("audio_config.attention_context_left = ", cfg_.attention_context_left, " with chunk ",
                          cfg_.attention_chunk_size, ": the window must hold 1 to ", context / 2 + 1, " keys"));
  if (Hd % 2 || Hd % nh)
    throw ConfigError(cat("audio_config.hidden_size = ", Hd, " must be even and a multiple of the ", nh, " heads"));

  // Relative position embedding (Gemma4AudioRelPositionalEncoding), in f32 as torch computes it:
  // inv[m] = exp(m · −ln(1e4)/(Hd/2 − 1)), pe(δ) = [sin(δ·inv), cos(δ·inv)].
  const int64_t half = Hd / 2;
  const float increment = float(std::log(10000.0) / double(std::max<int64_t>(half - 1, 1)));
  rel_positions_ = Tensor::empty(DType::F32, {window_, Hd});
  float* pe = rel_positions_.data_as<float>();
  for (int64_t dist = 0; dist < window_; ++dist)
    for (int64_t m = 0; m < half; ++m) {
      const float inv = std::exp(float(m) * -increment);
      const float angle = float(dist) * inv;
      pe[dist * Hd + m] = std::sin(angle);
      pe[dist * Hd + half + m] = std::cos(angle);
    }
  for (const AudioLayerWeights& lw : w_.layers) {
    // softplus(per_dim_scale) as torch (threshold 20), rounded once to f32.
    Tensor sp = Tensor::empty(DType::F32, {hd});
    const float* p = lw.per_dim_scale.data_as<const float>();
    for (int64_t e = 0; e < hd; ++e) {
      const double x = p[e];
      sp.data_as<float>()[e] = float(x > 20.0 ? x : std::log1p(std::exp(x)));
    }
    q_dim_scale_.push_back(sp);
    glu_value_.push_back(output_rows(lw.linear_start, 0, Hd));
    glu_gate_.push_back(output_rows(lw.linear_start, Hd, 2 * Hd));
  }
}

// clamp(x, −G, G) with G = min(gradient_clipping, f32 max): a no-op on finite f32 activations at the
// released 1e10, kept because transformers applies it (and it turns an inf into a large finite value).
void AudioTower::clip(const Exec& ex, const Tensor& x, Tensor& out) const {
  const float G = float(std::min(cfg_.gradient_clipping, double(std::numeric_limits<float>::max())));
  ops::unary(x, out, {ops::UnaryKind::Clamp, -G, G}, ex);
}

// Macaron half-step: x += residual_weight · post_norm(clip(ffw_2(silu(ffw_1(pre_norm(clip(x))))))).
void AudioTower::feed_forward(Arena& A, const Exec& ex, const AudioFeedForwardWeights& f, Tensor& x) const {
  const int64_t n = x.size(0), Hd = cfg_.hidden_size;
  const float eps = float(cfg_.rms_norm_eps);
  const size_t mark = A.mark();
  Tensor hn = A.tensor(DType::F32, {n, Hd}), scratch = A.tensor(DType::F32, {n, Hd});
  clip(ex, x, hn);
  ops::rms_norm(hn, f.pre_layer_norm, eps, hn, ex);
  Tensor u = A.tensor(DType::F32, {n, 4 * Hd});
  clippable_linear(ex, f.ffw_layer_1, scratch, hn, u);
  ops::unary(u, u, {ops::UnaryKind::Silu}, ex);
  Tensor u_clip = A.tensor(DType::F32, {n, 4 * Hd});
  clippable_linear(ex, f.ffw_layer_2, u_clip, u, hn);
  clip(ex, hn, hn);
  ops::rms_norm(hn, f.post_layer_norm, eps, hn, ex);
  ops::unary(hn, hn, {ops::UnaryKind::Scale, float(cfg_.residual_weight)}, ex);
  ops::binary(x, hn, x, ops::BinaryKind::Add, ex);
  A.reset(mark);
}

// x += post_norm(clip(post(local_attention(q, k, v, R)))) over pre_norm(clip(x)), spec §4.4: q scaled by
// hd^-0.5/ln 2 then by softplus(per_dim_scale), k by ln(1+e)/ln 2, R = relative_k_proj(pe) (not scaled).
void AudioTower::attention(Arena& A, const Exec& ex, const AudioLayerWeights& lw, size_t layer, Tensor& x) const {
  const int64_t n = x.size(0), Hd = cfg_.hidden_size, nh = cfg_.num_attention_heads, hd = Hd / nh;
  const float eps = float(cfg_.rms_norm_eps);
  const size_t mark = A.mark();
  Tensor hn = A.tensor(DType::F32, {n, Hd}), scratch = A.tensor(DType::F32, {n, Hd});
  clip(ex, x, hn);
  ops::rms_norm(hn, lw.norm_pre_attn, eps, hn, ex);
  Tensor q = A.tensor(DType::F32, {n, nh, hd}), k = A.tensor(DType::F32, {n, nh, hd}), v = A.tensor(DType::F32, {n, nh, hd});
  Tensor q_flat = q.reshape({n, Hd}), k_flat = k.reshape({n, Hd}), v_flat = v.reshape({n, Hd});
  clippable_linear(ex, lw.q_proj, scratch, hn, q_flat);
  clippable_linear(ex, lw.k_proj, scratch, hn, k_flat);
  clippable_linear(ex, lw.v_proj, scratch, hn, v_flat);
  const double q_scale = std::pow(double(hd), -0.5) / std::log(2.0), k_scale = std::log1p(std::exp(1.0)) / std::log(2.0);
  ops::unary(q, q, {ops::UnaryKind::Scale, float(q_scale)}, ex);
  ops::binary(q, q_dim_scale_[layer], q, ops::BinaryKind::Mul, ex);
  ops::unary(k, k, {ops::UnaryKind::Scale, float(k_scale)}, ex);
  Tensor rel = A.tensor(DType::F32, {window_, nh, hd});
  Tensor rel_flat = rel.reshape({window_, Hd});
  ops::linear(rel_positions_, lw.relative_k_proj, nullptr, rel_flat, ex);
  Tensor att = A.tensor(DType::F32, {n, nh, hd});
  ops::local_attention(q, k, v, rel, float(cfg_.attention_logit_cap), att, ex);
  name_intermediate(att, "a_kqv_out", int64_t(layer));
  Tensor y = A.tensor(DType::F32, {n, Hd});
  clippable_linear(ex, lw.post, scratch, att.reshape({n, Hd}), y);
  clip(ex, y, y);
  ops::rms_norm(y, lw.norm_post_attn, eps, y, ex);
  ops::binary(x, y, x, ops::BinaryKind::Add, ex);
  A.reset(mark);
}

// x += linear_end(silu(conv_norm(clip(dwconv(glu(linear_start(pre_norm(x)))))))), spec §4.3.
void AudioTower::light_conv(Arena& A, const Exec& ex, const AudioLayerWeights& lw, size_t layer, Tensor& x) const {
  const int64_t n = x.size(0), Hd = cfg_.hidden_size;
  const float eps = float(cfg_.rms_norm_eps);
  const size_t mark = A.mark();
  Tensor hn = A.tensor(DType::F32, {n, Hd}), scratch = A.tensor(DType::F32, {n, Hd});
  ops::rms_norm(x, lw.lconv_pre_layer_norm, eps, hn, ex);
  // GLU over linear_start's output: its two halves computed as two linears over the weight's row halves
  // (the same dot products), value · sigmoid(gate).
  Tensor value = A.tensor(DType::F32, {n, Hd}), gate = A.tensor(DType::F32, {n, Hd});
  clippable_linear(ex, glu_value_[layer], scratch, hn, value);
  clippable_linear(ex, glu_gate_[layer], scratch, hn, gate);
  ops::unary(gate, gate, {ops::UnaryKind::Sigmoid}, ex);
  ops::binary(value, gate, value, ops::BinaryKind::Mul, ex);
  Tensor conv = A.tensor(DType::F32, {n, Hd});
  ops::depthwise_conv1d_causal(value, lw.depthwise_conv1d, conv, ex);
  clip(ex, conv, conv);
  ops::rms_norm(conv, lw.conv_norm, eps, conv, ex);
  ops::unary(conv, conv, {ops::UnaryKind::Silu}, ex);
  Tensor y = A.tensor(DType::F32, {n, Hd});
  clippable_linear(ex, lw.linear_end, scratch, conv, y);
  ops::binary(x, y, x, ops::BinaryKind::Add, ex);
  A.reset(mark);
}

void AudioTower::forward(Arena& A, const Exec& ex, const Tensor& features, int64_t valid_frames, AudioOutput& out) const {
  const int64_t F = features.size(0), mel = features.size(1), Hd = cfg_.hidden_size;
  const int64_t c0 = cfg_.subsampling_conv_channels[0], c1 = cfg_.subsampling_conv_channels[1];
  const float eps = float(cfg_.rms_norm_eps);
  const ops::Conv2dParams conv_p{2, 2, 1, 1};  // 3×3, stride 2, padding 1
  ops::CommandScope scope(ex);
  A.reset();

  // Host-staged input [1, 1, F, mel]: the features with the invalid frames zeroed (mask before conv 0).
  Tensor x0 = A.tensor(DType::F32, {1, 1, F, mel});
  std::memcpy(x0.data(), features.data(), size_t(valid_frames * mel) * sizeof(float));
  std::memset(x0.data_as<float>() + valid_frames * mel, 0, size_t((F - valid_frames) * mel) * sizeof(float));

  // Subsampling layer: conv → LayerNorm over channels (no bias) → ReLU, channels last [T, f, C] for the norm.
  auto subsample = [&](const Tensor& in, const Tensor& conv_w, const Tensor& norm_w, int64_t C) {
    const int64_t T = ops::conv_out_size(in.size(2), 3, 2, 1), f = ops::conv_out_size(in.size(3), 3, 2, 1);
    Tensor conv = A.tensor(DType::F32, {1, C, T, f});
    ops::conv2d(in, conv_w, Tensor(), conv, conv_p, ex);
    Tensor cl = A.tensor(DType::F32, {T, f, C});
    ops::copy(conv.reshape({C, T, f}).permute({1, 2, 0}), cl, ex);
    ops::layer_norm(cl, norm_w, Tensor(), eps, cl, ex);
    ops::unary(cl, cl, {ops::UnaryKind::Relu}, ex);
    return cl;
  };
  Tensor s0 = subsample(x0, w_.layer0_conv, w_.layer0_norm, c0);  // [T1, f1, c0]
  const int64_t T1 = s0.size(0), f1 = s0.size(1), valid1 = (valid_frames + 1) / 2;
  // mask[::2] before conv 1: rows past the valid ones are multiplied by zero, as transformers does
  if (valid1 < T1) {
    Tensor tail = s0.slice(0, valid1, T1);
    ops::unary(tail, tail, {ops::UnaryKind::Scale, 0.0f}, ex);
  }
  Tensor x1 = A.tensor(DType::F32, {1, c0, T1, f1});
  Tensor x1_planes = x1.reshape({c0, T1, f1});
  ops::copy(s0.permute({2, 0, 1}), x1_planes, ex);
  Tensor s1 = subsample(x1, w_.layer1_conv, w_.layer1_norm, c1);  // [T2, f2, c1]
  const int64_t n = audio_tokens_for_frames(valid_frames), f2 = s1.size(1);
  // Flatten (frequency, channel) with the channel fastest, valid tokens only, then the input projection.
  Tensor x = A.tensor(DType::F32, {n, Hd});
  ops::linear(s1.slice(0, 0, n).reshape({n, f2 * c1}), w_.input_proj_linear, nullptr, x, ex);
  name_intermediate(x, "a_inp_embd", -1);
  const size_t mark = A.mark();

  for (size_t l = 0; l < w_.layers.size(); ++l) {
    const AudioLayerWeights& lw = w_.layers[l];
    A.reset(mark);
    feed_forward(A, ex, lw.feed_forward1, x);
    attention(A, ex, lw, l, x);
    light_conv(A, ex, lw, l, x);
    feed_forward(A, ex, lw.feed_forward2, x);
    clip(ex, x, x);
    ops::rms_norm(x, lw.norm_out, eps, x, ex);
    name_intermediate(x, "a_l_out", int64_t(l));
  }

  // output_proj (the one biased linear), then embed_audio: weightless RMSNorm and the projection.
  A.reset(mark);
  ops::linear(x, w_.output_proj_weight, &w_.output_proj_bias, out.hidden, ex);
  name_intermediate(out.hidden, "a_hidden", -1);
  Tensor normed = A.tensor(DType::F32, {n, cfg_.output_proj_dims});
  ops::rms_norm(out.hidden, Tensor(), eps, normed, ex);
  ops::linear(normed, w_.embedding_projection, nullptr, out.soft, ex);
  name_intermediate(out.soft, "a_soft_tokens", -1);
  scope.finish();
}

AudioOutput AudioTower::encode(const Tensor& features, int64_t valid_frames) const {
  if (features.dtype() != DType::F32 || features.dim() != 2 || !features.is_contiguous())
    throw InputError(cat("audio: features must be f32 [frames, mel bins] contiguous, got ", features.describe()));
  const int64_t F = features.size(0), mel = features.size(1);
  const int64_t f2 = ops::conv_out_size(ops::conv_out_size(mel, 3, 2, 1), 3, 2, 1);
  if (mel < 1 || f2 * cfg_.subsampling_conv_channels[1] != w_.input_proj_linear.size(1))
    throw InputError(cat("audio: features have ", mel, " mel bins; this audio tower's input projection takes ",
                         w_.input_proj_linear.size(1), " = (bins / 4) · ", cfg_.subsampling_conv_channels[1],
                         " values per token (128 bins, as Gemma4AudioFeatureExtractor makes)"));
  if (valid_frames < 1 || valid_frames > F)
    throw InputError(cat("audio: valid_frames = ", valid_frames, " must be in [1, ", F, "] (the clip has ", F,
                         " frames; a clip shorter than 20 ms has no valid frame)"));
  const float* fp = features.data_as<const float>();
  for (int64_t i = 0; i < valid_frames * mel; ++i)
    if (!std::isfinite(fp[i]))
      throw InputError(cat("audio: features[", i / mel, ", ", i % mel, "] = ", fp[i], " is not finite"));
  const int64_t n = audio_tokens_for_frames(valid_frames), H_text = w_.embedding_projection.size(0);
  const size_t need = runtime::measure_arena_bytes([&](Arena& activations, Arena& outputs) {
    AudioOutput o{outputs.tensor(DType::F32, {n, cfg_.output_proj_dims}), outputs.tensor(DType::F32, {n, H_text})};
    forward(activations, runtime::measure_exec(), features, valid_frames, o);
  });
  Arena A(need);
  AudioOutput out{Tensor::empty(DType::F32, {n, cfg_.output_proj_dims}), Tensor::empty(DType::F32, {n, H_text})};
  forward(A, ex_, features, valid_frames, out);
  return out;
}

}  // namespace mb::gemma4
