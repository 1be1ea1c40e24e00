// The truncation steps of latte::Sampler (top-k, top-p, min-p, typical-p, greedy) against the
// brute-force reference in support/sampling_reference.hpp, on fresh random logits.
#include <doctest/doctest.h>

#include "support/sampling_reference.hpp"

#include <latte/sampler.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

using latte::Sampler;
using latte::SamplerParams;
using latte::test::ReferenceChain;
using latte::test::ReferenceDistribution;

namespace {

// Params with every truncation off, temperature 1: the caller switches on what it tests.
SamplerParams all_off() {
  return {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .typical_p = 1.0f, .penalty_last_n = 0};
}

// Same token set, and probabilities within the float precision of the sampler (its exp() has a
// relative error below 4e-7; renormalised float probabilities add a few ulps).
void check_same_distribution(const std::vector<Sampler::TokenProbability>& got, const ReferenceDistribution& want) {
  REQUIRE(got.size() == want.size());
  double max_relative = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    REQUIRE(got[i].token == want[i].first);
    max_relative = std::max(max_relative, std::abs(got[i].probability - want[i].second) / want[i].second);
  }
  CHECK(max_relative < 2e-5);
}

// Cumulative mass of the reference ranking before a threshold step, to pick thresholds that sit
// clearly between two cumulative values (rounding cannot move the cut there).
double distance_to_cut(const std::vector<double>& cumulative, double p) {
  const auto it = std::lower_bound(cumulative.begin(), cumulative.end(), p);
  double d = it == cumulative.end() ? 1.0 : *it - p;
  if (it != cumulative.begin()) d = std::min(d, p - *(it - 1));
  return d;
}

std::vector<double> ranked_cumulative(const std::vector<double>& logits, double temperature, int top_k = 0) {
  std::vector<int32_t> ids = latte::test::reference_rank(logits);
  if (top_k > 0 && static_cast<size_t>(top_k) < ids.size()) ids.resize(static_cast<size_t>(top_k));
  const std::vector<double> p = latte::test::reference_softmax(logits, ids, temperature);
  std::vector<double> cumulative(p.size());
  double sum = 0.0;
  for (size_t i = 0; i < p.size(); ++i) cumulative[i] = sum += p[i];
  return cumulative;
}

// A threshold in [lo, hi] at least `margin` away from every cumulative value near it; 0 if none found.
double safe_threshold(const std::vector<double>& cumulative, double lo, double hi, double margin,
                      std::mt19937_64& rng) {
  std::uniform_real_distribution<double> pick(lo, hi);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const double p = pick(rng);
    if (distance_to_cut(cumulative, p) > margin) return p;
  }
  return 0.0;
}

}  // namespace

TEST_CASE("top-p keeps exactly the smallest set of most probable tokens with mass >= p (155k vocab, no top-k)") {
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  int checked = 0;
  for (int trial = 0; trial < 6; ++trial) {
    const std::vector<float> logits = latte::test::realistic_logits(155136, rng);
    const std::vector<double> l = latte::test::to_double(logits);
    const double temperature = trial % 2 ? 0.7 : 1.3;
    const double top_p = safe_threshold(ranked_cumulative(l, temperature), 0.3, 0.99, 1e-5, rng);
    if (top_p == 0.0) continue;
    CAPTURE(temperature);
    CAPTURE(top_p);
    SamplerParams params = all_off();
    params.temperature = static_cast<float>(temperature);
    params.top_p = static_cast<float>(top_p);
    Sampler sampler(params);
    const ReferenceDistribution want =
        latte::test::reference_distribution(l, {.temperature = temperature, .top_p = static_cast<float>(top_p)});
    check_same_distribution(sampler.probabilities(logits), want);
    ++checked;
  }
  CHECK(checked >= 3);
}

TEST_CASE("top-p is exact when thousands of tokens share the crossing histogram bin") {
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> flat(0.0f, 0.3f);  // near-uniform: the nucleus holds most tokens
  std::vector<float> logits(20000);
  for (float& v : logits) v = flat(rng);
  const std::vector<double> l = latte::test::to_double(logits);
  const double top_p = safe_threshold(ranked_cumulative(l, 1.0), 0.5, 0.95, 2e-6, rng);
  REQUIRE(top_p > 0.0);
  SamplerParams params = all_off();
  params.top_p = static_cast<float>(top_p);
  Sampler sampler(params);
  check_same_distribution(sampler.probabilities(logits),
                          latte::test::reference_distribution(l, {.top_p = static_cast<float>(top_p)}));
}

TEST_CASE("top-k keeps the k largest logits, ties going to the lower id") {
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> level(0, 9);  // many exact ties
  for (int k : {1, 5, 17, 40, 299}) {
    std::vector<float> logits(300);
    for (float& v : logits) v = static_cast<float>(level(rng)) * 0.5f;
    SamplerParams params = all_off();
    params.top_k = k;
    Sampler sampler(params);
    CAPTURE(k);
    check_same_distribution(sampler.probabilities(logits),
                            latte::test::reference_distribution(latte::test::to_double(logits), {.top_k = k}));
  }
}

TEST_CASE("top-p after top-k works on the k survivors") {
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> spread(0.0f, 1.0f);  // flat enough that the cut moves with p
  std::vector<float> logits(5000);
  for (float& v : logits) v = spread(rng);
  const std::vector<double> l = latte::test::to_double(logits);
  const std::vector<double> cumulative = ranked_cumulative(l, 0.8, 300);
  for (auto [lo, hi] : {std::pair{0.1, 0.3}, std::pair{0.4, 0.6}, std::pair{0.7, 0.9}, std::pair{0.9, 0.99}}) {
    const double top_p = safe_threshold(cumulative, lo, hi, 1e-5, rng);
    REQUIRE(top_p > 0.0);
    CAPTURE(top_p);
    SamplerParams params = all_off();
    params.temperature = 0.8f;
    params.top_k = 300;
    params.top_p = static_cast<float>(top_p);
    Sampler sampler(params);
    check_same_distribution(
        sampler.probabilities(logits),
        latte::test::reference_distribution(l, {.temperature = 0.8, .top_k = 300, .top_p = static_cast<float>(top_p)}));
  }
}

TEST_CASE("min-p keeps the tokens with p >= min_p * p_max") {
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> spread(0.0f, 2.0f);
  std::vector<float> logits(3000);
  for (float& v : logits) v = spread(rng);
  const std::vector<double> l = latte::test::to_double(logits);
  for (float min_p : {0.001f, 0.02f, 0.1f, 0.5f}) {
    // Skip a threshold that falls within rounding of some token's probability ratio.
    const std::vector<int32_t> ids = latte::test::reference_rank(l);
    const std::vector<double> p = latte::test::reference_softmax(l, ids, 1.0);
    bool close = false;
    for (double v : p) close |= std::abs(v / p[0] - min_p) < 1e-5 * min_p;
    if (close) continue;
    CAPTURE(min_p);
    SamplerParams params = all_off();
    params.min_p = min_p;
    Sampler dense(params);  // min-p straight over the vocabulary
    check_same_distribution(dense.probabilities(logits), latte::test::reference_distribution(l, {.min_p = min_p}));
    params.top_k = 2900;  // min-p over the survivors of another step
    Sampler after_top_k(params);
    check_same_distribution(after_top_k.probabilities(logits),
                            latte::test::reference_distribution(l, {.top_k = 2900, .min_p = min_p}));
  }
}

TEST_CASE("typical-p keeps the locally typical set of the brute-force definition") {
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const std::vector<float> logits = latte::test::realistic_logits(800, rng);
  const std::vector<double> l = latte::test::to_double(logits);
  // Cumulative mass in the typical order (|-log p - H| ascending), to keep thresholds off the cuts.
  const std::vector<int32_t> ids = latte::test::reference_rank(l);
  const std::vector<double> p = latte::test::reference_softmax(l, ids, 1.5);
  double entropy = 0.0;
  for (double v : p) entropy -= v * std::log(v);
  std::vector<double> deviation(p.size());
  for (size_t i = 0; i < p.size(); ++i) deviation[i] = std::abs(-std::log(p[i]) - entropy);
  std::vector<size_t> order(p.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return deviation[a] < deviation[b]; });
  std::vector<double> cumulative;
  double sum = 0.0;
  for (size_t i : order) cumulative.push_back(sum += p[i]);
  for (auto [lo, hi] : {std::pair{0.1, 0.3}, std::pair{0.4, 0.6}, std::pair{0.7, 0.9}, std::pair{0.9, 0.99}}) {
    const double typical_p = safe_threshold(cumulative, lo, hi, 1e-5, rng);
    REQUIRE(typical_p > 0.0);
    CAPTURE(typical_p);
    SamplerParams params = all_off();
    params.temperature = 1.5f;
    params.typical_p = static_cast<float>(typical_p);
    Sampler sampler(params);
    check_same_distribution(
        sampler.probabilities(logits),
        latte::test::reference_distribution(l, {.temperature = 1.5, .typical_p = static_cast<float>(typical_p)}));
  }
}

TEST_CASE("the default chain gives the reference distribution on a 129,280-token vocabulary") {
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const SamplerParams defaults;
  int checked = 0;
  for (int trial = 0; trial < 4; ++trial) {
    const std::vector<float> logits = latte::test::realistic_logits(129280, rng);
    const std::vector<double> l = latte::test::to_double(logits);
    const ReferenceChain chain{
        .temperature = defaults.temperature, .top_k = defaults.top_k, .top_p = defaults.top_p, .min_p = defaults.min_p};
    if (distance_to_cut(ranked_cumulative(l, chain.temperature, chain.top_k), chain.top_p) < 1e-5) continue;
    Sampler sampler(defaults);
    check_same_distribution(sampler.probabilities(logits), latte::test::reference_distribution(l, chain));
    ++checked;
  }
  CHECK(checked >= 2);
}

TEST_CASE("temperature 0 is greedy: the largest logit, ties to the lowest id") {
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> level(-20, 20);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> logits(1000);
    for (float& v : logits) v = static_cast<float>(level(rng)) * 0.25f;  // the max is usually tied
    const size_t want = static_cast<size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    Sampler sampler({.temperature = 0.0f, .seed = static_cast<uint64_t>(trial)});
    CHECK(sampler.sample(logits) == static_cast<latte::Token>(want));
    const auto dist = sampler.probabilities(logits);
    REQUIRE(dist.size() == 1);
    CHECK(dist[0].token == static_cast<latte::Token>(want));
  }
}

TEST_CASE("temperature 0 ignores the truncation steps and equals a near-zero temperature with top_k = 1") {
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  Sampler greedy({.temperature = 0.0f, .top_k = 3, .top_p = 0.1f, .min_p = 0.9f, .typical_p = 0.1f});
  Sampler top1({.temperature = 1e-3f, .top_k = 1, .top_p = 1.0f, .min_p = 0.0f, .seed = 7});
  for (int trial = 0; trial < 20; ++trial) {
    const std::vector<float> logits = latte::test::realistic_logits(4096, rng);
    CHECK(greedy.sample(logits) == top1.sample(logits));
  }
}

TEST_CASE("sampled tokens always come from the truncated set") {
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const std::vector<float> logits = latte::test::realistic_logits(2000, rng);
  SamplerParams params = all_off();
  params.top_p = 0.6f;
  params.min_p = 0.01f;
  params.seed = seed;
  Sampler sampler(params);
  const auto allowed = sampler.probabilities(logits);
  for (int draw = 0; draw < 500; ++draw) {
    const latte::Token t = sampler.sample(logits);
    const bool found = std::any_of(allowed.begin(), allowed.end(), [t](const auto& e) { return e.token == t; });
    REQUIRE(found);
  }
}
