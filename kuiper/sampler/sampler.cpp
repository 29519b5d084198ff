#include "kuiper/sampler/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kuiper/op/kernels/cpu/cpu_kernels.h"

namespace kuiper {
namespace {

Status check_finite(std::span<const float> logits) {
  const auto bad = std::find_if(logits.begin(), logits.end(), [](float v) { return !std::isfinite(v); });
  if (bad == logits.end()) return ok_status();
  return invalid_argument("non-finite logit " + std::to_string(*bad) + " for token " +
                          std::to_string(bad - logits.begin()));
}

}  // namespace

Status validate(const SamplerConfig& config) {
  if (!(config.temperature >= 0.f) || !std::isfinite(config.temperature)) {
    return invalid_argument("temperature must be a finite number >= 0 (0 = greedy), got " +
                            std::to_string(config.temperature));
  }
  if (!(config.top_p > 0.f && config.top_p <= 1.f)) {
    return invalid_argument("top_p must be in (0, 1] (1 = off), got " +
                            std::to_string(config.top_p));
  }
  if (config.top_k < 0) {
    return invalid_argument("top_k must be >= 0 (0 = off), got " + std::to_string(config.top_k));
  }
  if (!(config.min_p >= 0.f && config.min_p <= 1.f)) {
    return invalid_argument("min_p must be in [0, 1] (0 = off), got " + std::to_string(config.min_p));
  }
  return ok_status();
}

void apply_penalties(std::span<float> logits, const Penalties& p, std::span<const int32_t> seen,
                     std::span<const int32_t> generated) {
  const auto in_range = [&](int32_t id) { return id >= 0 && static_cast<size_t>(id) < logits.size(); };
  if (p.repetition != 1.f) {
    std::vector<int32_t> ids(seen.begin(), seen.end());
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (int32_t id : ids) {
      if (!in_range(id)) continue;
      float& l = logits[id];
      l = l > 0.f ? l / p.repetition : l * p.repetition;
    }
  }
  if (p.presence == 0.f && p.frequency == 0.f) return;
  std::vector<int32_t> ids(generated.begin(), generated.end());
  std::sort(ids.begin(), ids.end());
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j < ids.size() && ids[j] == ids[i]) ++j;
    if (in_range(ids[i])) logits[ids[i]] -= static_cast<float>(j - i) * p.frequency + p.presence;
    i = j;
  }
}

Sampler::Sampler(const SamplerConfig& config) : config_(config), rng_(config.seed) {}

bool Sampler::heavier(const Candidate& a, const Candidate& b) {
  // Ties broken by token id so that the order, and hence the draw, is fully determined.
  return a.weight > b.weight || (a.weight == b.weight && a.token < b.token);
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

StatusOr<int32_t> Sampler::sample(std::span<const float> logits) {
  if (logits.empty()) return invalid_argument("sampling needs at least one logit");
  // Every path below compares or exponentiates logits; one NaN would make the choice (or the
  // draw's index) meaningless.
  if (is_greedy()) {
    const int32_t token = op::cpu::finite_argmax(logits);
    if (token < 0) return check_finite(logits);  // names the first bad logit
    return token;
  }
  KUIPER_RETURN_IF_ERROR(check_finite(logits));
  KUIPER_ASSIGN_OR_RETURN(auto kept, filter(logits));
  return draw(kept.first, kept.second);
}

StatusOr<std::vector<std::pair<int32_t, double>>> Sampler::distribution(std::span<const float> logits) {
  if (logits.empty()) return invalid_argument("sampling needs at least one logit");
  if (is_greedy()) return invalid_argument("a greedy sampler has no distribution");
  KUIPER_RETURN_IF_ERROR(check_finite(logits));
  KUIPER_ASSIGN_OR_RETURN(auto kept, filter(logits));
  std::sort(candidates_.begin(), candidates_.begin() + kept.first, heavier);
  std::vector<std::pair<int32_t, double>> out;
  for (size_t i = 0; i < kept.first; ++i) out.emplace_back(candidates_[i].token, candidates_[i].weight / kept.second);
  return out;
}

StatusOr<std::pair<size_t, double>> Sampler::filter(std::span<const float> logits) {
  const size_t n = logits.size();
  if (candidates_.size() < n) candidates_.resize(n);
  // In double, 1 / temperature (at most ~7e44 for the smallest subnormal float) and the gap to
  // the maximum (up to twice FLT_MAX) times it stay finite, and the maximum's own gap is an
  // exact 0: its weight is 1 and every weight is in [0, 1], never NaN (a float 1 / temperature
  // overflows below about 3e-39, and 0 * inf is NaN). A temperature so small that
  // the gaps underflow the exponential leaves only the maxima: greedy, ties drawn evenly.
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  const double inv_temperature = 1.0 / config_.temperature;
  for (size_t i = 0; i < n; ++i) {
    const float scaled = static_cast<float>((logits[i] - max_logit) * inv_temperature);
    candidates_[i] = {std::exp(scaled), static_cast<int32_t>(i)};
  }

  size_t count = n;
  if (config_.min_p > 0.f) count = keep_min_p(count);
  if (config_.top_k > 0) count = keep_top_k(count);
  double mass = 0;
  for (size_t i = 0; i < count; ++i) mass += candidates_[i].weight;
  if (config_.top_p < 1.f) {
    count = keep_nucleus(count, mass);
    mass = 0;
    for (size_t i = 0; i < count; ++i) mass += candidates_[i].weight;
  }
  return std::pair{count, mass};
}

size_t Sampler::keep_min_p(size_t count) {
  // The heaviest candidate weighs exp(0) = 1, so the threshold is min_p itself.
  const float threshold = config_.min_p;
  const auto end = std::partition(candidates_.begin(), candidates_.begin() + count,
                                  [threshold](const Candidate& c) { return c.weight >= threshold; });
  return static_cast<size_t>(end - candidates_.begin());
}

size_t Sampler::keep_top_k(size_t count) {
  const size_t k = static_cast<size_t>(config_.top_k);
  if (k >= count) return count;
  // Selection, not a sort: O(n) for a 128k vocabulary, and the draw does not need an order.
  std::nth_element(candidates_.begin(), candidates_.begin() + (k - 1),
                   candidates_.begin() + count, heavier);
  return k;
}

size_t Sampler::keep_nucleus(size_t count, double mass) {
  if (count <= 1) return count;
  // A token lighter than (1 - p) / (count - 1) of the mass cannot be in the nucleus: all such
  // tokens together (at most count - 1 of them) weigh less than 1 - p, so the heavier ones
  // already pass p. Filtering first leaves only a handful of tokens to sort.
  const double cutoff = (1.0 - config_.top_p) * mass / static_cast<double>(count - 1);
  const auto end = std::partition(candidates_.begin(), candidates_.begin() + count,
                                  [cutoff](const Candidate& c) { return c.weight >= cutoff; });
  const size_t kept = static_cast<size_t>(end - candidates_.begin());
  std::sort(candidates_.begin(), end, heavier);

  const double target = static_cast<double>(config_.top_p) * mass;
  double cumulative = 0;
  for (size_t i = 0; i < kept; ++i) {
    cumulative += candidates_[i].weight;
    if (cumulative >= target) return i + 1;
  }
  return kept;  // only reached through rounding: the filtered tokens are the nucleus
}

int32_t Sampler::draw(size_t count, double mass) {
  const double r = uniform() * mass;
  double cumulative = 0;
  for (size_t i = 0; i < count; ++i) {
    cumulative += candidates_[i].weight;
    if (r < cumulative) return candidates_[i].token;
  }
  return candidates_[count - 1].token;  // r landed in the rounding gap at the very end
}

}  // namespace kuiper
