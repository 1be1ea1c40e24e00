// Logit bias, repetition / frequency / presence penalties, the history window and parameter
// validation of latte::Sampler. Amounts are read back through probabilities(): with temperature 1
// and no truncation, log(p_i / p_j) equals the difference of the processed logits.
#include <doctest/doctest.h>

#include "support/sampling_reference.hpp"

#include <latte/error.hpp>
#include <latte/sampler.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

using latte::Sampler;
using latte::SamplerParams;
using latte::Token;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

SamplerParams untruncated() {
  return {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .typical_p = 1.0f, .penalty_last_n = 0};
}

// The processed logits recovered from the sampler's distribution, up to a common constant, made
// absolute by pinning token `anchor` (which the test leaves unprocessed) to its input logit.
std::vector<double> recovered_logits(Sampler& sampler, const std::vector<float>& logits, size_t anchor) {
  const auto dist = sampler.probabilities(logits);
  REQUIRE(dist.size() == logits.size());
  std::vector<double> out(logits.size());
  const double shift = logits[anchor] - std::log(static_cast<double>(dist[anchor].probability));
  for (size_t i = 0; i < dist.size(); ++i) out[i] = std::log(static_cast<double>(dist[i].probability)) + shift;
  return out;
}

std::vector<float> random_logits(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> spread(0.0f, 1.5f);
  std::vector<float> logits(n);
  for (float& v : logits) v = spread(rng);
  return logits;
}

template <typename F>
void check_throws_naming(F&& f, const std::string& needle) {
  try {
    f();
    FAIL("expected latte::Error mentioning '" << needle << "'");
  } catch (const latte::Error& e) {
    CHECK(e.code() == latte::ErrorCode::invalid_argument);
    CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, std::string(e.what()));
  }
}

}  // namespace

TEST_CASE("logit bias adds exactly its amount to exactly the biased tokens") {
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const std::vector<float> logits = random_logits(64, rng);
  SamplerParams params = untruncated();
  params.logit_bias = {{3, 2.5f}, {10, -1.25f}, {63, 0.75f}};
  Sampler sampler(params);
  const std::vector<double> got = recovered_logits(sampler, logits, 0);
  for (size_t i = 0; i < logits.size(); ++i) {
    const auto it = params.logit_bias.find(static_cast<Token>(i));
    const double want = logits[i] + (it == params.logit_bias.end() ? 0.0 : it->second);
    CHECK(got[i] == doctest::Approx(want).epsilon(1e-5));
  }
}

TEST_CASE("a -inf logit bias bans the token, even when it is the argmax") {
  std::vector<float> logits(16, 0.0f);
  logits[5] = 9.0f;  // the argmax
  logits[7] = 4.0f;  // the runner-up
  Sampler greedy({.temperature = 0.0f, .logit_bias = {{5, -kInf}}});
  CHECK(greedy.sample(logits) == 7);
  SamplerParams params = untruncated();
  params.logit_bias = {{5, -kInf}};
  params.seed = 11;
  Sampler sampler(params);
  const auto dist = sampler.probabilities(logits);
  CHECK(dist.size() == 15);
  for (const auto& e : dist) CHECK(e.token != 5);
  for (int draw = 0; draw < 2000; ++draw) REQUIRE(sampler.sample(logits) != 5);
}

TEST_CASE("repetition penalty divides positive and multiplies negative logits of the tokens in the window") {
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::vector<float> logits = random_logits(64, rng);
  logits[4] = 2.0f;   // positive: divided
  logits[9] = -1.5f;  // negative: multiplied
  logits[20] = 0.0f;  // zero stays zero
  SamplerParams params = untruncated();
  params.repeat_penalty = 1.3f;
  params.penalty_last_n = 8;
  Sampler sampler(params);
  sampler.accept(std::vector<Token>{4, 9, 4, 20, 9, 9});  // counts do not matter for this penalty
  const std::vector<double> got = recovered_logits(sampler, logits, 0);
  for (size_t i = 0; i < logits.size(); ++i) {
    double want = logits[i];
    if (i == 4 || i == 9 || i == 20) want = want > 0 ? want / 1.3 : want * 1.3;
    CAPTURE(i);
    CHECK(got[i] == doctest::Approx(want).epsilon(1e-5).scale(1.0));
  }
}

TEST_CASE("frequency and presence penalties subtract count * frequency + presence from seen tokens") {
  const uint64_t seed = latte::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const std::vector<float> logits = random_logits(64, rng);
  SamplerParams params = untruncated();
  params.frequency_penalty = 0.4f;
  params.presence_penalty = -0.3f;  // negative values reward repetition
  params.repeat_penalty = 1.1f;     // applied first
  params.penalty_last_n = 64;
  Sampler sampler(params);
  const std::map<Token, int> counts{{2, 1}, {7, 3}, {30, 2}, {63, 5}};
  for (const auto& [token, count] : counts) {
    for (int c = 0; c < count; ++c) sampler.accept(token);
  }
  const std::vector<double> got = recovered_logits(sampler, logits, 0);
  for (size_t i = 0; i < logits.size(); ++i) {
    double want = logits[i];
    const auto it = counts.find(static_cast<Token>(i));
    if (it != counts.end()) {
      want = want > 0 ? want / 1.1 : want * 1.1;
      want -= it->second * 0.4 + -0.3;
    }
    CAPTURE(i);
    CHECK(got[i] == doctest::Approx(want).epsilon(1e-5).scale(1.0));
  }
}

TEST_CASE("penalties only see the last penalty_last_n tokens, and sample() appends to the history") {
  std::vector<float> logits(32, 0.0f);
  SamplerParams params = untruncated();
  params.presence_penalty = 1.0f;
  params.penalty_last_n = 3;
  Sampler sampler(params);
  sampler.accept(std::vector<Token>{1, 2, 3, 4});  // token 1 has left the 3-token window
  auto window = sampler.penalty_window();
  CHECK(std::vector<Token>(window.begin(), window.end()) == std::vector<Token>{2, 3, 4});
  const std::vector<double> got = recovered_logits(sampler, logits, 0);
  CHECK(got[1] == doctest::Approx(0.0).scale(1.0));
  for (int t : {2, 3, 4}) CHECK(got[static_cast<size_t>(t)] == doctest::Approx(-1.0).scale(1.0));
  const Token drawn = sampler.sample(logits);
  window = sampler.penalty_window();
  CHECK(std::vector<Token>(window.begin(), window.end()) == std::vector<Token>{3, 4, drawn});
  sampler.reset();
  CHECK(sampler.penalty_window().empty());
  // penalty_last_n = 0 turns penalties off; -1 keeps the whole history.
  Sampler off({.presence_penalty = 5.0f, .penalty_last_n = 0});
  off.accept(7);
  CHECK(off.penalty_window().empty());
  Sampler all({.presence_penalty = 5.0f, .penalty_last_n = -1});
  for (Token t = 0; t < 500; ++t) all.accept(t % 32);
  CHECK(all.penalty_window().size() == 500);
}

TEST_CASE("invalid sampler parameters throw invalid_argument naming the field and value") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto make = [](SamplerParams p) { return [p] { Sampler s(p); }; };
  check_throws_naming(make({.temperature = -0.5f}), "temperature = -0.5");
  check_throws_naming(make({.temperature = nan}), "temperature = nan");
  check_throws_naming(make({.temperature = kInf}), "temperature = inf");
  check_throws_naming(make({.top_k = -1}), "top_k = -1");
  check_throws_naming(make({.top_p = 0.0f}), "top_p = 0");
  check_throws_naming(make({.top_p = 1.5f}), "top_p = 1.5");
  check_throws_naming(make({.top_p = nan}), "top_p = nan");
  check_throws_naming(make({.min_p = -0.1f}), "min_p = -0.1");
  check_throws_naming(make({.min_p = 1.01f}), "min_p = 1.01");
  check_throws_naming(make({.typical_p = 0.0f}), "typical_p = 0");
  check_throws_naming(make({.typical_p = 2.0f}), "typical_p = 2");
  check_throws_naming(make({.repeat_penalty = 0.0f}), "repeat_penalty = 0");
  check_throws_naming(make({.repeat_penalty = -1.0f}), "repeat_penalty = -1");
  check_throws_naming(make({.repeat_penalty = nan}), "repeat_penalty = nan");
  check_throws_naming(make({.frequency_penalty = nan}), "frequency_penalty = nan");
  check_throws_naming(make({.presence_penalty = -kInf}), "presence_penalty = -inf");
  check_throws_naming(make({.penalty_last_n = -2}), "penalty_last_n = -2");
  check_throws_naming(make({.logit_bias = {{-3, 1.0f}}}), "negative token id -3");
  check_throws_naming(make({.logit_bias = {{3, nan}}}), "logit_bias[3] = nan");
  check_throws_naming(make({.logit_bias = {{3, kInf}}}), "logit_bias[3] = inf");
  // The boundaries themselves are valid.
  CHECK_NOTHROW(Sampler({.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 1.0f, .typical_p = 1.0f}));
  CHECK_NOTHROW(Sampler({.min_p = 0.0f, .penalty_last_n = -1, .logit_bias = {{0, -kInf}}}));
}

TEST_CASE("bad logits throw invalid_argument naming the problem") {
  Sampler sampler;
  check_throws_naming([&] { sampler.sample(std::vector<float>{}); }, "empty");
  std::vector<float> logits(100, 0.5f);
  logits[42] = std::numeric_limits<float>::quiet_NaN();
  check_throws_naming([&] { sampler.sample(logits); }, "logits[42] = nan");
  logits[42] = kInf;
  check_throws_naming([&] { sampler.sample(logits); }, "logits[42] = inf");
  std::vector<float> banned(10, -kInf);
  check_throws_naming([&] { sampler.sample(banned); }, "every one of the 10 logits is -inf");
  std::vector<float> one(10, 0.0f);
  Sampler ban_all({.logit_bias = {{0, -kInf},
                                  {1, -kInf},
                                  {2, -kInf},
                                  {3, -kInf},
                                  {4, -kInf},
                                  {5, -kInf},
                                  {6, -kInf},
                                  {7, -kInf},
                                  {8, -kInf},
                                  {9, -kInf}}});
  check_throws_naming([&] { ban_all.sample(one); }, "is -inf after bias and penalties");
  Sampler outside({.logit_bias = {{10, 1.0f}}});
  check_throws_naming([&] { outside.sample(one); }, "token 10 is outside the vocabulary of 10");
  Sampler history({.repeat_penalty = 1.2f});
  history.accept(12);
  check_throws_naming([&] { history.sample(one); }, "history token 12 is outside the vocabulary of 10");
  check_throws_naming([&] { history.accept(-1); }, "token id -1");
}
