// latte::Sampler's random stream and draw: the generator against published reference outputs, its
// exp() against std::exp, seed reproducibility, and empirical frequencies against softmax(l / T)
// by a chi-square test.
#include <doctest/doctest.h>

#include "support/sampling_reference.hpp"

#include <latte/sampler.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using latte::Sampler;
using latte::SamplerParams;
using latte::SamplerRng;
using latte::Token;

namespace {

// Pearson's chi-square statistic of `counts` against `expected_probability` over `draws` draws.
double chi_square(const std::vector<int>& counts, const std::vector<double>& expected_probability, int draws) {
  double statistic = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double expected = expected_probability[i] * draws;
    statistic += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return statistic;
}

// Upper 1e-6 quantile of the chi-square distribution with `dof` degrees of freedom, by the
// Wilson-Hilferty approximation (z = 4.753 for a one-sided 1e-6 tail).
double chi_square_critical(int dof) {
  const double k = dof;
  const double a = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - a + 4.753 * std::sqrt(a), 3.0);
}

}  // namespace

TEST_CASE("splitmix64 and xoshiro256** reproduce the published reference outputs") {
  // splitmix64 from state 0 (Vigna's reference program).
  uint64_t x = 0;
  CHECK(SamplerRng::splitmix64(x) == 0xe220a8397b1dcdafu);
  CHECK(SamplerRng::splitmix64(x) == 0x6e789e6aa1b965f4u);
  CHECK(SamplerRng::splitmix64(x) == 0x06c45d188009454fu);
  // xoshiro256** from the state {1, 2, 3, 4}.
  SamplerRng rng = SamplerRng::from_state({1, 2, 3, 4});
  CHECK(rng.next() == 11520u);
  CHECK(rng.next() == 0u);
  CHECK(rng.next() == 1509978240u);
  CHECK(rng.next() == 1215971899390074240u);
}

TEST_CASE("uniform() is the top 24 bits of the next output over 2^24") {
  SamplerRng a(12345);
  SamplerRng b(12345);
  for (int i = 0; i < 1000; ++i) {
    const uint64_t bits = a.next();
    const float u = b.uniform();
    REQUIRE(u == static_cast<float>(bits >> 40) / 16777216.0f);
    REQUIRE(u >= 0.0f);
    REQUIRE(u < 1.0f);
  }
  // Saving the state resumes the exact stream.
  SamplerRng resumed = SamplerRng::from_state(a.state());
  CHECK(resumed.next() == b.next());
}

TEST_CASE("the sampler's exp() is within 4e-7 of exp over its range and exactly 0 below -87.7") {
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> range(-87.0f, 0.0f);
  double worst = 0.0;
  for (int i = 0; i < 200000; ++i) {
    const float x = i < 100 ? -static_cast<float>(i) * 0.01f : range(rng);
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(latte::detail::exp_nonpositive(x) - want) / want);
  }
  CHECK(worst < 4e-7);
  CHECK(latte::detail::exp_nonpositive(0.0f) == 1.0f);
  CHECK(latte::detail::exp_nonpositive(-87.8f) == 0.0f);
  CHECK(latte::detail::exp_nonpositive(-1000.0f) == 0.0f);
  CHECK(latte::detail::exp_nonpositive(-std::numeric_limits<float>::infinity()) == 0.0f);
}

TEST_CASE("the sampler's exp() performs exactly its documented IEEE operation sequence (no FMA contraction)") {
  // Each operation's result goes through a volatile float, so no compiler can fuse the reference's
  // multiply-adds. A build that contracts the library's (GCC without -ffp-contract=off on an FMA
  // target) gives different bits here.
  const auto mul = [](float a, float b) {
    volatile float product = a * b;
    return static_cast<float>(product);
  };
  const auto add = [](float a, float b) {
    volatile float sum = a + b;
    return static_cast<float>(sum);
  };
  const auto reference = [&](float x) {
    const float xc = x > -104.0f ? x : -104.0f;
    float n = mul(xc, 1.44269504088896341f);
    n = add(add(n, 12582912.0f), -12582912.0f);
    float r = add(xc, -mul(n, 0.693359375f));
    r = add(r, -mul(n, -2.12194440e-4f));
    float p = 1.0f / 720.0f;
    for (float c : {1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f}) p = add(mul(p, r), c);
    const int32_t exponent = std::max(static_cast<int32_t>(n) + 127, 0);
    return mul(p, std::bit_cast<float>(exponent << 23));
  };
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> range(-110.0f, 0.0f);
  std::vector<float> x(300000);
  for (float& v : x) v = range(rng);
  std::vector<float> vectorised(x.size());  // the sampler's vectorised pass: (x - 0) * 1 = x
  latte::detail::exp_weights(x.data(), vectorised.data(), x.size(), 0.0f, 1.0f);
  size_t mismatches = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t want = std::bit_cast<uint32_t>(reference(x[i]));
    mismatches += std::bit_cast<uint32_t>(latte::detail::exp_nonpositive(x[i])) != want;
    mismatches += std::bit_cast<uint32_t>(vectorised[i]) != want;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("temperature reshapes the empirical distribution exactly as softmax(logits / T) predicts") {
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> spread(0.0f, 1.0f);
  std::vector<float> logits(16);
  for (float& v : logits) v = spread(rng);
  const std::vector<double> l = latte::test::to_double(logits);
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  constexpr int kDraws = 200000;
  for (float temperature : {0.5f, 1.0f, 1.8f}) {
    Sampler sampler({.temperature = temperature, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = seed});
    std::vector<int> counts(logits.size(), 0);
    for (int d = 0; d < kDraws; ++d) ++counts[static_cast<size_t>(sampler.sample(logits))];
    const double fit = chi_square(counts, latte::test::reference_softmax(l, ids, temperature), kDraws);
    CAPTURE(temperature);
    CHECK(fit < chi_square_critical(15));
    // And the same counts reject the distribution of a wrong temperature.
    if (temperature != 1.0f) {
      const double wrong = chi_square(counts, latte::test::reference_softmax(l, ids, 1.0), kDraws);
      CHECK(wrong > 10 * chi_square_critical(15));
    }
  }
}

TEST_CASE("draws after truncation follow the renormalised truncated distribution") {
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const std::vector<float> logits = latte::test::realistic_logits(1000, rng);
  const std::vector<double> l = latte::test::to_double(logits);
  Sampler sampler({.temperature = 1.3f, .top_k = 12, .top_p = 1.0f, .min_p = 0.0f, .seed = seed});
  const latte::test::ReferenceDistribution want =
      latte::test::reference_distribution(l, {.temperature = 1.3, .top_k = 12});
  REQUIRE(want.size() == 12);
  constexpr int kDraws = 120000;
  std::vector<int> counts(want.size(), 0);
  for (int d = 0; d < kDraws; ++d) {
    const Token t = sampler.sample(logits);
    size_t slot = 0;
    while (slot < want.size() && want[slot].first != t) ++slot;
    REQUIRE(slot < want.size());
    ++counts[slot];
  }
  std::vector<double> expected;
  for (const auto& e : want) expected.push_back(e.second);
  // Tokens with tiny expected counts make the statistic unstable; pool them into one cell.
  std::vector<int> pooled_counts;
  std::vector<double> pooled_expected;
  int rare_count = 0;
  double rare_expected = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] * kDraws < 20) {
      rare_count += counts[i];
      rare_expected += expected[i];
    } else {
      pooled_counts.push_back(counts[i]);
      pooled_expected.push_back(expected[i]);
    }
  }
  if (rare_expected > 0) {
    pooled_counts.push_back(rare_count);
    pooled_expected.push_back(rare_expected);
  }
  REQUIRE(pooled_counts.size() >= 2);
  CHECK(chi_square(pooled_counts, pooled_expected, kDraws) <
        chi_square_critical(static_cast<int>(pooled_counts.size()) - 1));
}

TEST_CASE("the same seed gives the same tokens, a different seed different ones, reset() restarts") {
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::vector<std::vector<float>> steps;
  for (int i = 0; i < 64; ++i) {
    std::vector<float> logits(1000);
    std::uniform_real_distribution<float> flat(0.0f, 0.5f);  // broad: many tokens are likely
    for (float& v : logits) v = flat(rng);
    steps.push_back(logits);
  }
  const auto run = [&](Sampler& sampler) {
    std::vector<Token> out;
    for (const auto& logits : steps) out.push_back(sampler.sample(logits));
    return out;
  };
  const SamplerParams params{.temperature = 1.0f, .top_p = 0.9f, .repeat_penalty = 1.1f, .seed = seed};
  Sampler a(params);
  Sampler b(params);
  SamplerParams other = params;
  other.seed = seed + 1;
  Sampler c(other);
  const std::vector<Token> first = run(a);
  CHECK(first == run(b));
  CHECK(first != run(c));
  a.reset();
  CHECK(run(a) == first);
}
