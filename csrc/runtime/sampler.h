// Token sampler: penalties, temperature, top-k, top-p, min-p and a seeded, platform-independent
// generator, so the same seed yields the same tokens on every run and backend.
// Order (as transformers' logits processors): repetition penalty, presence / frequency penalties,
// then temperature, top-k, top-p, min-p on the softmax of what is left; temperature 0 = greedy.
#pragma once
#include <cstdint>
#include <vector>

namespace mb::runtime {

struct SamplerParams {
  float temperature = 1.0f;         // 0 = greedy (argmax, lowest index on ties)
  int64_t top_k = 0;                // 0 = off
  float top_p = 1.0f;               // in (0, 1]; 1 = off
  float min_p = 0.0f;               // in [0, 1); 0 = off: keep tokens with p >= min_p · p_max
  float repetition_penalty = 1.0f;  // > 0; HF rule: seen logit > 0 → / penalty, else × penalty
  float presence_penalty = 0.0f;    // subtracted once from every seen token's logit
  float frequency_penalty = 0.0f;   // subtracted per occurrence
};

// xoshiro256** seeded through splitmix64: fixed integer arithmetic, identical everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1) with 53 random bits
 private:
  uint64_t s_[4];
};

class Sampler {
 public:
  Sampler(SamplerParams params, uint64_t seed);  // throws InputError naming a bad parameter
  // Records prompt tokens: the repetition penalty covers them (as transformers, which penalises every
  // token of input_ids); presence / frequency penalties count generated tokens only (as OpenAI's API).
  void observe_prompt(const int32_t* tokens, int64_t n);
  // Picks the next token from logits[vocab] (not modified) and records it.
  int32_t sample(const float* logits, int64_t vocab);
  const SamplerParams& params() const { return p_; }
  void reset(uint64_t seed);

 private:
  // Penalties on: the per-token tables below are kept (without them a sampler holds no per-vocabulary memory).
  bool penalised() const;
  // Sizes the dense per-token tables for `vocab` (first sample; again only if the vocabulary changes).
  void fit(int64_t vocab);

  SamplerParams p_;
  Rng rng_;
  // Dense per-token tables of the penalties, sized at the first sample: no allocation per token after that.
  // The scratch of a draw (penalised logits, candidate order, probabilities) is the sampling thread's, so
  // a batch of sequences holds one copy of it, not one per sequence.
  std::vector<int32_t> counts_;      // generated token -> occurrences
  std::vector<uint8_t> in_prompt_;   // prompt token -> seen
  std::vector<int32_t> prompt_ids_;  // prompt tokens observed before the vocabulary size is known
};

}  // namespace mb::runtime
