// Turns the logits of one position into the next token: greedy argmax, or a seeded random draw
// from the temperature-scaled softmax, optionally restricted to the tokens at least min-p times
// as likely as the most likely one, then to the top-k tokens, then to the nucleus (smallest set
// of most likely tokens whose probability reaches top-p). Penalties for tokens already seen
// adjust the logits before that (apply_penalties).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "kuiper/base/status.h"

namespace kuiper {

struct SamplerConfig {
  float temperature = 0.f;  // 0 = greedy
  float top_p = 1.f;        // 1 = off
  int top_k = 0;            // 0 = off
  uint64_t seed = 0;
  float min_p = 0.f;        // 0 = off
};

// Checks temperature >= 0 (finite), 0 < top_p <= 1, top_k >= 0 and 0 <= min_p <= 1.
Status validate(const SamplerConfig& config);

// Penalties on tokens already seen.
struct Penalties {
  float presence = 0.f;    // OpenAI: subtracted once from every token generated so far
  float frequency = 0.f;   // OpenAI: subtracted once per time a token was generated
  float repetition = 1.f;  // CTRL/HF: a seen token's logit is divided by it (multiplied when negative)
  bool any() const { return presence != 0.f || frequency != 0.f || repetition != 1.f; }
};
// Applies `p` to logits in place: the repetition penalty over `seen` (prompt and generated
// tokens), then presence and frequency over `generated`. Ids outside the logits are ignored.
void apply_penalties(std::span<float> logits, const Penalties& p, std::span<const int32_t> seen,
                     std::span<const int32_t> generated);

class Sampler {
 public:
  explicit Sampler(const SamplerConfig& config);  // config already validated

  // Picks the next token from fp32 logits on the host (non-empty). Greedy: argmax, first on
  // ties. Otherwise softmax(logits / temperature), keep top-k, then nucleus top-p, renormalise,
  // draw. The same seed and logits give the same tokens on every run and platform. A NaN or
  // infinite logit (a damaged model) is an error, never a token.
  StatusOr<int32_t> sample(std::span<const float> logits);

  // The distribution sample() draws from: the kept tokens with their probabilities (summing to
  // 1), heaviest first. Not for greedy configs.
  StatusOr<std::vector<std::pair<int32_t, double>>> distribution(std::span<const float> logits);

  bool is_greedy() const { return config_.temperature == 0.f; }
  const SamplerConfig& config() const { return config_; }

 private:
  struct Candidate {
    float weight;  // unnormalised probability exp((logit - max) / temperature)
    int32_t token;
  };

  static bool heavier(const Candidate& a, const Candidate& b);
  // A uniform draw in [0, 1) from the top 53 bits, so that the sequence does not depend on
  // how the standard library implements its distributions.
  double uniform();
  // Fills candidates_ with the tokens the draw may pick; returns their count and mass.
  StatusOr<std::pair<size_t, double>> filter(std::span<const float> logits);
  // Keeps the candidates at least min_p times as heavy as the heaviest; returns the new count.
  size_t keep_min_p(size_t count);
  // Keeps the k heaviest of candidates_[0, count); returns the new count.
  size_t keep_top_k(size_t count);
  // Keeps the nucleus of candidates_[0, count), sorted heaviest first; returns the new count.
  size_t keep_nucleus(size_t count, double mass);
  // Draws one of candidates_[0, count) in proportion to its weight; `mass` is their sum.
  int32_t draw(size_t count, double mass);

  SamplerConfig config_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;  // scratch, sized to the vocabulary on first use
};

}  // namespace kuiper
