#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/errors.h"

namespace mb::runtime {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) {
  for (auto& s : s_) s = splitmix64(seed);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return double(next() >> 11) * 0x1.0p-53; }

Sampler::Sampler(SamplerParams p, uint64_t seed) : p_(p), rng_(seed) {
  if (!(p.temperature >= 0.f) || !std::isfinite(p.temperature)) throw InputError(cat("sampler: temperature must be >= 0, got ", p.temperature));
  if (p.top_k < 0) throw InputError(cat("sampler: top_k must be >= 0, got ", p.top_k));
  if (!(p.top_p > 0.f && p.top_p <= 1.f)) throw InputError(cat("sampler: top_p must be in (0, 1], got ", p.top_p));
  if (!(p.min_p >= 0.f && p.min_p < 1.f)) throw InputError(cat("sampler: min_p must be in [0, 1), got ", p.min_p));
  if (!(p.repetition_penalty > 0.f) || !std::isfinite(p.repetition_penalty))
    throw InputError(cat("sampler: repetition_penalty must be > 0, got ", p.repetition_penalty));
  if (!std::isfinite(p.presence_penalty)) throw InputError("sampler: presence_penalty must be finite");
  if (!std::isfinite(p.frequency_penalty)) throw InputError("sampler: frequency_penalty must be finite");
}

void Sampler::reset(uint64_t seed) {
  rng_ = Rng(seed);
  std::fill(counts_.begin(), counts_.end(), 0);
  std::fill(in_prompt_.begin(), in_prompt_.end(), uint8_t(0));
  prompt_ids_.clear();
}

bool Sampler::penalised() const {
  return p_.repetition_penalty != 1.f || p_.presence_penalty != 0.f || p_.frequency_penalty != 0.f;
}

void Sampler::observe_prompt(const int32_t* tokens, int64_t n) {
  if (p_.repetition_penalty == 1.f) return;  // only the repetition penalty reads the prompt
  if (!in_prompt_.empty()) {
    for (int64_t i = 0; i < n; ++i)
      if (tokens[i] >= 0 && size_t(tokens[i]) < in_prompt_.size()) in_prompt_[size_t(tokens[i])] = 1;
    return;
  }
  prompt_ids_.insert(prompt_ids_.end(), tokens, tokens + n);
}

void Sampler::fit(int64_t vocab) {
  if (!penalised() || int64_t(counts_.size()) == vocab) return;
  counts_.assign(size_t(vocab), 0);
  in_prompt_.assign(size_t(vocab), 0);
  for (int32_t t : prompt_ids_)
    if (t >= 0 && t < vocab) in_prompt_[size_t(t)] = 1;
  prompt_ids_.clear();
}

namespace {
// The sampling thread's scratch (Sampler::sample), grown to the vocabulary once.
struct DrawScratch {
  std::vector<float> work;  // the penalised logits
  std::vector<int32_t> order;
  std::vector<double> prob;
};
}  // namespace

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  if (vocab <= 0) throw InputError("sampler: empty logits");
  fit(vocab);
  for (int64_t i = 0; i < vocab; ++i)
    if (std::isnan(logits[i])) throw InputError(cat("sampler: logit ", i, " is NaN"));
  thread_local DrawScratch scratch;
  const float* z = logits;
  if (penalised()) {
    scratch.work.assign(logits, logits + vocab);
    float* w = scratch.work.data();
    auto penalise_repeat = [&](int32_t tok) {
      float& v = w[tok];
      v = v > 0.f ? v / p_.repetition_penalty : v * p_.repetition_penalty;
    };
    if (p_.repetition_penalty != 1.f)
      for (int32_t tok = 0; tok < vocab; ++tok)
        if (in_prompt_[size_t(tok)] || counts_[size_t(tok)]) penalise_repeat(tok);
    if (p_.presence_penalty != 0.f || p_.frequency_penalty != 0.f)
      for (int32_t tok = 0; tok < vocab; ++tok)
        if (const int32_t cnt = counts_[size_t(tok)]) w[tok] -= p_.presence_penalty + p_.frequency_penalty * float(cnt);
    z = w;
  }
  int32_t chosen;
  if (p_.temperature == 0.f) {
    chosen = int32_t(std::max_element(z, z + vocab) - z);  // first maximum: lowest index on ties
  } else {
    // Candidates sorted by logit (descending, lower index first on ties); top-k cuts the list.
    std::vector<int32_t>& order = scratch.order;
    order.resize(size_t(vocab));
    std::iota(order.begin(), order.end(), 0);
    auto by_logit = [z](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
    int64_t n = vocab;
    if (p_.top_k > 0 && p_.top_k < vocab) {
      std::partial_sort(order.begin(), order.begin() + p_.top_k, order.end(), by_logit);
      n = p_.top_k;
    } else {
      std::sort(order.begin(), order.end(), by_logit);
    }
    // Softmax of logit / temperature over the candidates (f64 for a stable cumulative sum).
    std::vector<double>& prob = scratch.prob;
    prob.resize(static_cast<size_t>(n));
    const double inv_t = 1.0 / double(p_.temperature);
    const double zmax = double(z[order[0]]) * inv_t;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += prob[size_t(i)] = std::exp(double(z[order[size_t(i)]]) * inv_t - zmax);
    for (auto& q : prob) q /= sum;
    // top-p: the smallest prefix whose mass reaches top_p (always at least one token).
    int64_t keep = n;
    if (p_.top_p < 1.f) {
      double cum = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        cum += prob[size_t(i)];
        if (cum >= double(p_.top_p)) { keep = i + 1; break; }
      }
    }
    // min-p: drop tokens below min_p times the most likely one.
    if (p_.min_p > 0.f) {
      const double floor = double(p_.min_p) * prob[0];
      int64_t k = 1;
      while (k < keep && prob[size_t(k)] >= floor) ++k;
      keep = k;
    }
    double mass = 0.0;
    for (int64_t i = 0; i < keep; ++i) mass += prob[size_t(i)];
    const double u = rng_.uniform() * mass;
    double cum = 0.0;
    chosen = order[size_t(keep - 1)];
    for (int64_t i = 0; i < keep; ++i) {
      cum += prob[size_t(i)];
      if (u < cum) { chosen = order[size_t(i)]; break; }
    }
  }
  if (!counts_.empty()) ++counts_[size_t(chosen)];
  return chosen;
}

}  // namespace mb::runtime
