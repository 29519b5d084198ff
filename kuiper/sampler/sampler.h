// Turns the logits of one position into the next token: greedy argmax, or a seeded random draw
// from the temperature-scaled softmax, optionally restricted to the top-k tokens and then to
// the nucleus (smallest set of most likely tokens whose probability reaches top-p).
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
};

// Checks temperature >= 0 (finite), 0 < top_p <= 1 and top_k >= 0.
Status validate(const SamplerConfig& config);

class Sampler {
 public:
  explicit Sampler(const SamplerConfig& config);  // config already validated

  // Picks the next token from fp32 logits on the host (non-empty). Greedy: argmax, first on
  // ties. Otherwise softmax(logits / temperature), keep top-k, then nucleus top-p, renormalise,
  // draw. The same seed and logits give the same tokens on every run and platform. A NaN or
  // infinite logit (a damaged model) is an error, never a token.
  StatusOr<int32_t> sample(std::span<const float> logits);

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
