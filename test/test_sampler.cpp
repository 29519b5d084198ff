// Sampler tests. Every expected distribution (softmax, top-k set, nucleus) is computed here in
// double precision, independently of the sampler, and frequencies are checked with a
// chi-square bound that a sampler with the wrong temperature, renormalisation or filter fails.
#include "kuiper/sampler/sampler.h"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <map>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

// Counts heap allocations in this program so that "no allocation per call" can be checked.
// AddressSanitizer owns operator new, so sanitized builds skip that check instead.
static std::atomic<long> g_allocations{0};
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCountsAllocations = false;
#else
constexpr bool kCountsAllocations = true;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"  // free() does match this malloc()
void* operator new(std::size_t bytes) {
  ++g_allocations;
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop
#endif

namespace kuiper {
namespace {

std::vector<float> random_logits(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> logits(n);
  for (float& x : logits) x = dist(rng);
  return logits;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp((logits[i] - max) / temperature);
  for (double& x : p) x /= sum;
  return p;
}

// Tokens ordered by probability, most likely first.
std::vector<int> by_probability(const std::vector<double>& p) {
  std::vector<int> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  return order;
}

// Target distribution after top-k and top-p, renormalised; zero outside the kept set.
std::vector<double> filtered(const std::vector<double>& p, int top_k, double top_p) {
  std::vector<int> order = by_probability(p);
  if (top_k > 0 && static_cast<size_t>(top_k) < order.size()) order.resize(top_k);
  double kept_mass = 0;
  for (int t : order) kept_mass += p[t];
  size_t nucleus = 0;
  double cumulative = 0;
  while (nucleus < order.size() && cumulative < top_p * kept_mass) cumulative += p[order[nucleus++]];
  // The test must not sit on the boundary where float rounding could pick either size.
  if (top_p < 1) {
    EXPECT_GT(std::abs(cumulative - top_p * kept_mass), 1e-5 * kept_mass) << "ambiguous nucleus";
  }
  std::vector<double> q(p.size(), 0.0);
  for (size_t i = 0; i < nucleus; ++i) q[order[i]] = p[order[i]] / cumulative;
  return q;
}

// Upper 1e-5 quantile of chi-square with `df` degrees of freedom (Wilson-Hilferty).
double chi_square_bound(int df) {
  const double z = 4.265;  // standard normal upper 1e-5 quantile
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Draws `draws` tokens and checks that none falls outside `expected`'s support and that the
// frequencies fit `expected` (tokens with expected count < 5 are pooled into one cell).
void expect_distribution(Sampler& sampler, const std::vector<float>& logits,
                         const std::vector<double>& expected, int draws) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) {
    const int32_t token = sampler.sample(logits).value();
    ASSERT_GE(token, 0);
    ASSERT_LT(token, static_cast<int32_t>(logits.size()));
    ASSERT_GT(expected[token], 0.0) << "token " << token << " is outside the allowed set";
    ++counts[token];
  }
  double chi2 = 0, pooled_expected = 0, pooled_observed = 0;
  int cells = 0;
  for (size_t t = 0; t < logits.size(); ++t) {
    const double e = expected[t] * draws;
    if (e == 0) continue;
    if (e < 5) {
      pooled_expected += e;
      pooled_observed += counts[t];
      continue;
    }
    chi2 += (counts[t] - e) * (counts[t] - e) / e;
    ++cells;
  }
  if (pooled_expected > 0) {
    chi2 += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) /
            pooled_expected;
    ++cells;
  }
  ASSERT_GE(cells, 2) << "test distribution too concentrated to say anything";
  EXPECT_LT(chi2, chi_square_bound(cells - 1)) << "frequencies do not fit, " << cells << " cells";
}

TEST(SamplerConfig, ValidateAcceptsSensibleConfigs) {
  EXPECT_TRUE(validate(SamplerConfig{}).ok());
  EXPECT_TRUE(validate({.temperature = 0.7f, .top_p = 0.9f, .top_k = 40, .seed = 3}).ok());
  EXPECT_TRUE(validate({.temperature = 2.f, .top_p = 1.f, .top_k = 1}).ok());
}

TEST(SamplerConfig, ValidateRejectsBadValuesWithTheFieldName) {
  const std::vector<std::pair<SamplerConfig, std::string>> bad = {
      {{.temperature = -0.1f}, "temperature"},
      {{.temperature = NAN}, "temperature"},
      {{.temperature = INFINITY}, "temperature"},
      {{.top_p = 0.f}, "top_p"},
      {{.top_p = -0.5f}, "top_p"},
      {{.top_p = 1.01f}, "top_p"},
      {{.top_p = NAN}, "top_p"},
      {{.top_k = -1}, "top_k"},
  };
  for (const auto& [config, field] : bad) {
    const Status status = validate(config);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(status.message().find(field), std::string::npos) << status.message();
  }
}

TEST(Sampler, GreedyIsArgmaxFirstOnTies) {
  Sampler sampler(SamplerConfig{});
  EXPECT_TRUE(sampler.is_greedy());
  for (uint32_t seed = 0; seed < 20; ++seed) {
    std::vector<float> logits = random_logits(1 + seed * 37, seed, -5, 5);
    const auto expected = std::max_element(logits.begin(), logits.end()) - logits.begin();
    EXPECT_EQ(sampler.sample(logits).value(), expected);
  }
  const std::vector<float> tied = {1.f, 3.f, -2.f, 3.f, 3.f};
  EXPECT_EQ(sampler.sample(tied).value(), 1);
}

TEST(Sampler, TopKOfOneIsArgmax) {
  Sampler sampler({.temperature = 1.5f, .top_k = 1, .seed = 9});
  EXPECT_FALSE(sampler.is_greedy());
  const std::vector<float> logits = random_logits(333, 4, -1, 1);
  const auto expected = std::max_element(logits.begin(), logits.end()) - logits.begin();
  for (int i = 0; i < 100; ++i) EXPECT_EQ(sampler.sample(logits).value(), expected);
}

TEST(Sampler, SameSeedSameDrawsDifferentSeedDifferentDraws) {
  const std::vector<float> logits = random_logits(500, 1, -1, 1);
  const SamplerConfig config{.temperature = 1.f, .top_p = 0.95f, .top_k = 100, .seed = 1234};
  Sampler a(config), b(config), c({.temperature = 1.f, .top_p = 0.95f, .top_k = 100, .seed = 1235});
  EXPECT_EQ(a.config().seed, 1234u);
  int differences = 0;
  for (int i = 0; i < 200; ++i) {
    const int32_t x = a.sample(logits).value();
    EXPECT_EQ(x, b.sample(logits).value());
    differences += x != c.sample(logits).value();
  }
  EXPECT_GT(differences, 150);  // about 99% of draws differ for ~95 near-equal candidates
}

TEST(Sampler, FrequenciesMatchSoftmax) {
  const std::vector<float> logits = random_logits(12, 7, -2, 2);
  Sampler sampler({.temperature = 1.f, .seed = 42});
  expect_distribution(sampler, logits, softmax(logits, 1.0), 20000);
}

TEST(Sampler, FrequenciesMatchTemperatureScaledSoftmax) {
  const std::vector<float> logits = random_logits(12, 8, -1, 1);
  for (float temperature : {0.4f, 2.5f}) {
    Sampler sampler({.temperature = temperature, .seed = 5});
    expect_distribution(sampler, logits, softmax(logits, temperature), 20000);
  }
}

TEST(Sampler, TopKDrawsOnlyFromTheKMostLikely) {
  const std::vector<float> logits = random_logits(1000, 11, -3, 3);
  for (int k : {2, 5, 17}) {
    Sampler sampler({.temperature = 1.f, .top_k = k, .seed = static_cast<uint64_t>(k)});
    expect_distribution(sampler, logits, filtered(softmax(logits, 1.0), k, 1.0), 20000);
  }
}

TEST(Sampler, TopPDrawsOnlyFromTheNucleus) {
  const std::vector<float> logits = random_logits(300, 12, 0, 8);
  for (float top_p : {0.3f, 0.7f, 0.9f}) {
    Sampler sampler({.temperature = 1.f, .top_p = top_p, .seed = 77});
    expect_distribution(sampler, logits, filtered(softmax(logits, 1.0), 0, top_p), 20000);
  }
}

TEST(Sampler, TopKThenTopP) {
  const std::vector<float> logits = random_logits(400, 13, -2, 2);
  Sampler sampler({.temperature = 0.8f, .top_p = 0.6f, .top_k = 20, .seed = 2});
  expect_distribution(sampler, logits, filtered(softmax(logits, 0.8), 20, 0.6), 20000);
}

TEST(Sampler, LlamaSizedVocabularyWithoutAllocationPerCall) {
  const std::vector<float> logits = random_logits(128256, 14, -10, 10);
  const std::vector<double> nucleus = filtered(softmax(logits, 0.9), 0, 0.9);
  for (SamplerConfig config : {SamplerConfig{.temperature = 0.9f, .top_p = 0.9f, .seed = 1},
                               SamplerConfig{.temperature = 0.9f, .top_k = 50, .seed = 1},
                               SamplerConfig{.temperature = 0.9f, .seed = 1}}) {
    Sampler sampler(config);
    (void)sampler.sample(logits).value();  // the first call sizes the scratch buffers
    const long before = g_allocations.load();
    std::vector<int32_t> tokens(50);
    const long after_vector = g_allocations.load();
    for (int32_t& token : tokens) token = sampler.sample(logits).value();
    if (kCountsAllocations) {
      EXPECT_EQ(g_allocations.load(), after_vector) << "sample() allocated";
      EXPECT_EQ(after_vector - before, 1) << "the counter must see the vector's allocation";
    }
    if (config.top_p < 1.f) {
      for (int32_t token : tokens) EXPECT_GT(nucleus[token], 0.0) << token;
    }
  }
}

TEST(Sampler, NonFiniteLogitsAreAnErrorOnEveryPath) {
  // A damaged model's NaN or infinity must not become a token (nor an out-of-range read in
  // the top-k / top-p paths).
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    const std::vector<float> logits = {0.5f, bad, 2.f, 1.f};
    for (SamplerConfig config : {SamplerConfig{}, SamplerConfig{.temperature = 0.8f},
                                 SamplerConfig{.temperature = 0.8f, .top_k = 2},
                                 SamplerConfig{.temperature = 0.8f, .top_p = 0.9f}}) {
      Sampler sampler(config);
      const auto token = sampler.sample(logits);
      ASSERT_FALSE(token.ok()) << "temperature " << config.temperature << " gave " << token.value();
      EXPECT_EQ(token.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(token.status().message().find("token 1"), std::string::npos) << token.status().to_string();
    }
  }
}

// Any finite temperature > 0, from the smallest subnormal to FLT_MAX, on logits with ties and
// spreads up to 2 * FLT_MAX: every probability finite, every draw a valid id; a temperature
// too small to tell the top logits' neighbours from zero draws only the maxima (greedy, ties
// evenly); elsewhere the frequencies fit softmax(logits / T), computed here in double.
TEST(Sampler, AnyFiniteTemperatureGivesFiniteProbabilities) {
  const std::vector<std::vector<float>> logit_sets = {
      {1.f, 3.f, 3.f, -2.f, 0.5f},                        // a tie at the top
      {FLT_MAX, -FLT_MAX, 0.f, FLT_MAX / 2, -FLT_MAX},     // gaps up to 2 * FLT_MAX
      {-1e30f, 1e30f, 0.f, 2e30f},                        // gaps of 1e30
      {-7.f, -7.f, -7.f},                                 // all tied
  };
  const std::vector<float> temperatures = {1e-45f, 3e-39f, 1e-38f, 1e-30f, 1e-5f, 1.f, 1e30f, FLT_MAX};
  for (const std::vector<float>& logits : logit_sets) {
    const float top = *std::max_element(logits.begin(), logits.end());
    for (float temperature : temperatures) {
      SCOPED_TRACE(::testing::Message() << "temperature " << temperature << ", logits[0] " << logits[0]);
      Sampler sampler({.temperature = temperature, .seed = 11});
      const auto dist = sampler.distribution(logits);
      ASSERT_TRUE(dist.ok()) << dist.status().to_string();
      double total = 0;
      for (const auto& [token, probability] : *dist) {
        ASSERT_GE(token, 0);
        ASSERT_LT(token, static_cast<int32_t>(logits.size()));
        ASSERT_TRUE(std::isfinite(probability) && probability >= 0) << probability;
        total += probability;
      }
      EXPECT_NEAR(total, 1.0, 1e-9);
      // softmax(logits / T) in double; where a gap over T leaves exp() nothing but zero, only
      // the maxima remain.
      const std::vector<double> expected = softmax(logits, temperature);
      int distinct_cells = 0;
      for (double p : expected) distinct_cells += p * 20000 >= 5;
      if (distinct_cells >= 2) {
        expect_distribution(sampler, logits, expected, 20000);
        continue;
      }
      for (int i = 0; i < 200; ++i) {
        const int32_t token = sampler.sample(logits).value();
        ASSERT_GE(token, 0);
        ASSERT_LT(token, static_cast<int32_t>(logits.size()));
        EXPECT_EQ(logits[token], top) << "token " << token << " is not a maximum";
      }
    }
  }
}


TEST(Sampler, MinPKeepsTokensAtLeastThatFractionOfTheMostLikely) {
  // softmax([2, 1, 0, -1]) ∝ [1, e^-1, e^-2, e^-3] (relative to the top token): with min_p
  // 0.3 only the first two pass (e^-1 = 0.368, e^-2 = 0.135), renormalised to 1/(1+e^-1) and
  // e^-1/(1+e^-1).
  Sampler sampler({.temperature = 1.f, .min_p = 0.3f});
  const std::vector<float> logits = {2.f, 1.f, 0.f, -1.f};
  auto dist = sampler.distribution(logits);
  ASSERT_TRUE(dist.ok()) << dist.status().to_string();
  ASSERT_EQ(dist->size(), 2u);
  const double e1 = std::exp(-1.0);
  EXPECT_EQ((*dist)[0].first, 0);
  EXPECT_NEAR((*dist)[0].second, 1.0 / (1.0 + e1), 1e-6);
  EXPECT_EQ((*dist)[1].first, 1);
  EXPECT_NEAR((*dist)[1].second, e1 / (1.0 + e1), 1e-6);
  // At temperature 2 the ratios are e^-0.5 = 0.607, e^-1 = 0.368, e^-1.5 = 0.223: three pass.
  Sampler hot({.temperature = 2.f, .min_p = 0.3f});
  auto three = hot.distribution(logits);
  ASSERT_TRUE(three.ok());
  ASSERT_EQ(three->size(), 3u);
  const double mass = 1.0 + std::exp(-0.5) + std::exp(-1.0);
  EXPECT_NEAR((*three)[2].second, std::exp(-1.0) / mass, 1e-6);
  for (int i = 0; i < 200; ++i) EXPECT_LT(*sampler.sample(logits), 2);
}

TEST(Sampler, MinPIsValidated) {
  EXPECT_FALSE(validate(SamplerConfig{.min_p = -0.1f}).ok());
  EXPECT_FALSE(validate(SamplerConfig{.min_p = 1.5f}).ok());
  EXPECT_NE(validate(SamplerConfig{.min_p = NAN}).message().find("min_p"), std::string::npos);
}

TEST(Penalties, MatchHandComputedValues) {
  // Repetition 2 over seen {1, 3} (prompt and generated): 1.0 → 0.5, -2.0 → -4.0. Then over
  // generated [3, 3, 4]: frequency 0.5 and presence 0.25 subtract 2·0.5+0.25 from token 3 and
  // 0.5+0.25 from token 4. Token 0 and 2 are untouched; id 9 is outside and ignored.
  std::vector<float> logits = {0.3f, 1.0f, 0.7f, -2.0f, 1.5f};
  const std::vector<int32_t> seen = {1, 3, 1, 3, 3, 4, 9};
  const std::vector<int32_t> generated = {3, 3, 4};
  apply_penalties(logits, {.presence = 0.25f, .frequency = 0.5f, .repetition = 2.f}, seen, generated);
  const std::vector<float> expected = {0.3f, 0.5f, 0.7f, -4.0f - 1.25f, 1.5f / 2.f - 0.75f};
  for (size_t i = 0; i < logits.size(); ++i) EXPECT_FLOAT_EQ(logits[i], expected[i]) << i;
  // Off: nothing changes.
  std::vector<float> same = {0.3f, 1.0f};
  apply_penalties(same, {}, seen, generated);
  EXPECT_EQ(same, (std::vector<float>{0.3f, 1.0f}));
  EXPECT_FALSE(Penalties{}.any());
}

}  // namespace
}  // namespace kuiper
