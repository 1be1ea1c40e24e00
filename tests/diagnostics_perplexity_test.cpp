// latte::perplexity: the windowed protocol against a log-softmax of Session logits computed here,
// overlapping windows score every token once, and the two attention backends agree.
#include "support/random_models.hpp"

#include <latte/error.hpp>
#include <latte/perplexity.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace {

/// -log p(tokens[j] | window) for j in [first, end), the window being tokens[start, end).
std::vector<double> window_nll(const latte::Model& model, std::span<const latte::Token> tokens, int start, int end,
                               int first, const std::string& backend) {
  latte::Session s(model, {.n_ctx = end - start, .attention = backend, .logits_all = true, .n_threads = 1});
  s.eval(tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(end - start)));
  std::vector<double> out;
  for (int j = first; j < end; ++j) {
    const auto logits = s.logits(j - 1 - start);
    // log-softmax in long double, by the plain definition.
    long double z = 0;
    for (float v : logits) z += std::exp(static_cast<long double>(v));
    out.push_back(static_cast<double>(std::log(z) - static_cast<long double>(logits[static_cast<size_t>(tokens[j])])));
  }
  return out;
}

/// Checks r's per-token scores against `expected`, one by one; returns the sum of `expected`.
double check_nll(const latte::PerplexityResult& r, const std::vector<double>& expected) {
  REQUIRE(r.nll.size() == expected.size());
  double sum = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    CHECK(r.nll[i] == doctest::Approx(expected[i]).epsilon(1e-6));
    sum += expected[i];
  }
  return sum;
}

}  // namespace

TEST_CASE("perplexity scores disjoint windows from their second token") {
  const latte::Model model = latte::test::shared_random_model("test-v3");
  const auto tokens = latte::test::fresh_tokens(37, model.config().n_vocab);
  latte::PerplexityParams params;
  params.n_ctx = 16;
  params.session.attention = "mla";
  const latte::PerplexityResult r = latte::perplexity(model, tokens, params);
  std::vector<double> expected;
  for (int start = 0; start < 37; start += 16) {
    const int end = std::min(37, start + 16);
    const auto w = window_nll(model, tokens, start, end, start + 1, "mla");
    expected.insert(expected.end(), w.begin(), w.end());
  }
  CHECK(r.n_scored == 34);  // 15 + 15 + 4
  CHECK(r.n_windows == 3);
  CHECK(r.n_evaluated == 37);
  const double sum = check_nll(r, expected);
  const double mean = sum / static_cast<double>(expected.size());
  double sq = 0;
  for (double v : expected) sq += (v - mean) * (v - mean);
  CHECK(r.mean_nll == doctest::Approx(mean).epsilon(1e-6));
  CHECK(r.perplexity == doctest::Approx(std::exp(mean)).epsilon(1e-6));
  CHECK(r.nll_stderr ==
        doctest::Approx(std::sqrt(sq / static_cast<double>(expected.size() - 1) / static_cast<double>(expected.size())))
            .epsilon(1e-6));
  // A random model is near-uniform: the perplexity is of the order of the vocabulary.
  CHECK(r.perplexity > 0.2 * model.config().n_vocab);
}

TEST_CASE("overlapping windows score every token once, with the most context") {
  const latte::Model model = latte::test::shared_random_model("test-v2-lite");
  const auto tokens = latte::test::fresh_tokens(30, model.config().n_vocab);
  latte::PerplexityParams params;
  params.n_ctx = 12;
  params.stride = 5;
  params.session.attention = "mla";
  const latte::PerplexityResult r = latte::perplexity(model, tokens, params);
  // Windows [0,12) scores 1..11, [5,17) 12..16, [10,22) 17..21, [15,27) 22..26, [20,30) 27..29.
  std::vector<double> expected = window_nll(model, tokens, 0, 12, 1, "mla");
  for (int start = 5, scored_end = 12; scored_end < 30; start += 5) {
    const int end = std::min(30, start + 12);
    const auto w = window_nll(model, tokens, start, end, scored_end, "mla");
    expected.insert(expected.end(), w.begin(), w.end());
    scored_end = end;
  }
  REQUIRE(expected.size() == 29);
  check_nll(r, expected);
  CHECK(r.n_windows == 5);
}

TEST_CASE("mla and standard attention give the same perplexity") {
  for (std::string_view flavour : {"test-v3", "test-glm-dsa"}) {
    CAPTURE(flavour);
    const latte::Model model = latte::test::shared_random_model(flavour);
    const auto tokens = latte::test::fresh_tokens(40, model.config().n_vocab);
    latte::PerplexityParams params;
    params.n_ctx = 20;
    params.session.attention = "mla";
    const double mla = latte::perplexity(model, tokens, params).perplexity;
    params.session.attention = "standard";
    const double standard = latte::perplexity(model, tokens, params).perplexity;
    CHECK(std::abs(mla - standard) / standard < 0.005);
    CHECK(std::abs(mla - standard) / standard < 1e-4);  // fp32 backends agree far closer than 0.5%
  }
}

TEST_CASE("perplexity rejects what it cannot score") {
  const latte::Model model = latte::test::shared_random_model("test-v3");
  const std::vector<latte::Token> one{1}, some{1, 2, 3};
  latte::PerplexityParams params;
  CHECK_THROWS_AS(latte::perplexity(model, one, params), latte::Error);
  params.n_ctx = 1;
  CHECK_THROWS_AS(latte::perplexity(model, some, params), latte::Error);
  params.n_ctx = 4;
  params.stride = 5;
  CHECK_THROWS_AS(latte::perplexity(model, some, params), latte::Error);
}

TEST_CASE("second-half scoring: whole disjoint windows led by the window BOS, their second halves scored") {
  const latte::Model model = latte::test::shared_random_model("test-v3");
  const int n_vocab = model.config().n_vocab;
  const auto tokens = latte::test::fresh_tokens(45, n_vocab);  // windows [0,14), [14,28), [28,42); 3 left out
  // a window BOS unlike every window's own first token (windows of 14 and, below, of 7)
  auto starts_with = [&](latte::Token t) {
    for (int start = 0; start < 42; start += 7) {
      if (tokens[static_cast<size_t>(start)] == t) return true;
    }
    return false;
  };
  latte::Token bos = (tokens[14] + 1) % n_vocab;
  while (starts_with(bos)) bos = (bos + 1) % n_vocab;
  latte::PerplexityParams params;
  params.n_ctx = 14;
  params.session.attention = "mla";
  params.scoring = latte::PerplexityScoring::second_half;
  params.window_bos = bos;
  const latte::PerplexityResult r = latte::perplexity(model, tokens, params);
  // Each window evaluated as [bos, tokens[start + 1 .. start + 14)); positions 8..13 scored (14 / 2 + 1 on).
  std::vector<double> expected;
  for (int start = 0; start + 14 <= 45; start += 14) {
    std::vector<latte::Token> window(tokens.begin() + start, tokens.begin() + start + 14);
    window[0] = bos;
    const auto w = window_nll(model, window, 0, 14, 8, "mla");
    expected.insert(expected.end(), w.begin(), w.end());
  }
  REQUIRE(expected.size() == 18);
  CHECK(r.n_scored == 18);
  CHECK(r.n_windows == 3);
  CHECK(r.n_evaluated == 42);
  const double sum = check_nll(r, expected);
  CHECK(r.perplexity == doctest::Approx(std::exp(sum / 18.0)).epsilon(1e-6));
  // The window BOS is what the windows start with: without it every window's second half sees other context.
  params.window_bos.reset();
  const latte::PerplexityResult own = latte::perplexity(model, tokens, params);
  REQUIRE(own.nll.size() == 18);
  int moved = 0;
  for (size_t i = 0; i < 18; ++i) moved += std::abs(own.nll[i] - r.nll[i]) > 1e-6;
  CHECK(moved > 9);
  // An odd window: 7 / 2 = 3, positions 4..6 scored.
  params.n_ctx = 7;
  params.window_bos = bos;
  const latte::PerplexityResult odd = latte::perplexity(model, tokens, params);
  CHECK(odd.n_windows == 6);
  CHECK(odd.n_scored == 18);
  std::vector<latte::Token> last(tokens.begin() + 35, tokens.begin() + 42);
  last[0] = bos;
  const auto w = window_nll(model, last, 0, 7, 4, "mla");
  for (size_t i = 0; i < 3; ++i) CHECK(odd.nll[15 + i] == doctest::Approx(w[i]).epsilon(1e-6));
}

TEST_CASE("second-half scoring rejects what it cannot score") {
  const latte::Model model = latte::test::shared_random_model("test-v3");
  const auto tokens = latte::test::fresh_tokens(20, model.config().n_vocab);
  latte::PerplexityParams params;
  params.scoring = latte::PerplexityScoring::second_half;
  params.n_ctx = 21;  // no whole window
  CHECK_THROWS_AS(latte::perplexity(model, tokens, params), latte::Error);
  params.n_ctx = 2;  // nothing to score in a window
  CHECK_THROWS_AS(latte::perplexity(model, tokens, params), latte::Error);
  params.n_ctx = 8;
  params.stride = 4;  // windows overlap
  CHECK_THROWS_AS(latte::perplexity(model, tokens, params), latte::Error);
  params.stride = 8;
  CHECK(latte::perplexity(model, tokens, params).n_windows == 2);
  params.scoring = latte::PerplexityScoring::from_second;
  params.window_bos = latte::Token{1};  // only for second-half scoring
  CHECK_THROWS_AS(latte::perplexity(model, tokens, params), latte::Error);
}
