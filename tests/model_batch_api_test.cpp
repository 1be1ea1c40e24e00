// latte::decode_batch / eval_batch: several sessions advanced in one forward pass end exactly where
// each would have ended alone; bad batches are rejected before any session changes.
#include "support/random_models.hpp"
#include "support/test_options.hpp"

#include <latte/batch.hpp>
#include <latte/error.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

namespace {

using latte::Session;
using latte::Token;

latte::SessionParams params(int n_ctx, bool logits_all = false) {
  return {.n_ctx = n_ctx, .attention = latte::test::attention_backend(), .logits_all = logits_all, .n_threads = 2};
}

std::vector<float> copy(std::span<const float> v) { return {v.begin(), v.end()}; }

/// Every session's state that a rejected batch must leave alone.
struct Snapshot {
  std::vector<int> n_past;
  std::vector<std::vector<float>> logits;
};
Snapshot snapshot(std::span<Session* const> sessions) {
  Snapshot s;
  for (Session* x : sessions) {
    s.n_past.push_back(x->n_past());
    s.logits.push_back(copy(x->logits()));
  }
  return s;
}

}  // namespace

TEST_CASE("decode_batch gives every session the logits it gets decoding alone") {
  for (const char* preset : {"test-v2-lite", "test-glm-dsa"}) {
    CAPTURE(preset);
    const latte::Model m = latte::test::shared_random_model(preset);
    const int V = m.config().n_vocab;
    // Prompts of different lengths (20 passes the glm-dsa indexer's top_k of 16), prefilled alone.
    const int lengths[] = {20, 7, 1};
    std::vector<std::vector<Token>> prompts;
    std::vector<std::unique_ptr<Session>> batched, alone;
    for (int n : lengths) {
      prompts.push_back(latte::test::fresh_tokens(n, V));
      batched.push_back(std::make_unique<Session>(m, params(32)));
      alone.push_back(std::make_unique<Session>(m, params(32)));
      batched.back()->eval(prompts.back());
      alone.back()->eval(prompts.back());
    }
    std::vector<Session*> ptrs;
    for (auto& s : batched) ptrs.push_back(s.get());
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      const std::vector<Token> next = latte::test::fresh_tokens(3, V);
      latte::decode_batch(ptrs, next);
      for (size_t i = 0; i < alone.size(); ++i) {
        CAPTURE(i);
        alone[i]->eval(std::span(&next[i], 1));
        CHECK(batched[i]->n_past() == alone[i]->n_past());
        const auto got = batched[i]->logits();
        REQUIRE(got.size() == static_cast<size_t>(V));
        for (float x : got) REQUIRE(std::isfinite(x));
        CHECK(latte::test::relative_error(got, alone[i]->logits()) <= 1e-5);
      }
    }
  }
}

TEST_CASE("eval_batch prefills prompts of any length, splitting them across 256-token steps") {
  const latte::Model m = latte::test::shared_random_model("test-v2-lite");
  const int V = m.config().n_vocab;
  // 300 + 40 + 5 tokens: the first step holds 256 of the first prompt, the second the rest of all.
  const int lengths[] = {300, 40, 5};
  const bool all[] = {false, true, false};
  std::vector<std::vector<Token>> prompts;
  std::vector<std::unique_ptr<Session>> batched;
  std::vector<Session*> ptrs;
  std::vector<std::span<const Token>> lists;
  for (size_t i = 0; i < 3; ++i) {
    prompts.push_back(latte::test::fresh_tokens(lengths[i], V));
    batched.push_back(std::make_unique<Session>(m, params(320, all[i])));
    ptrs.push_back(batched.back().get());
  }
  for (const auto& p : prompts) lists.emplace_back(p);
  latte::eval_batch(ptrs, lists);
  for (size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    Session alone(m, params(320, all[i]));
    alone.eval(prompts[i]);
    CHECK(batched[i]->n_past() == lengths[i]);
    CHECK(latte::test::relative_error(batched[i]->logits(), alone.logits()) <= 1e-5);
    if (all[i]) {
      for (int t : {0, 17, lengths[i] - 2}) {
        CAPTURE(t);
        CHECK(latte::test::relative_error(batched[i]->logits(t), alone.logits(t)) <= 1e-5);
      }
    } else {
      CHECK_THROWS_AS((void)batched[i]->logits(0), latte::Error);
    }
  }
}

TEST_CASE("a bad batch is rejected before any session changes") {
  const latte::Model m = latte::test::shared_random_model("test-v2-lite");
  const int V = m.config().n_vocab;
  Session a(m, params(8)), b(m, params(8)), c(m, params(3));
  for (Session* s : {&a, &b, &c}) s->eval(latte::test::fresh_tokens(2, V));
  Session* const abc[] = {&a, &b, &c};
  const Snapshot before = snapshot(abc);
  auto expect_unchanged = [&] {
    const Snapshot now = snapshot(abc);
    CHECK(now.n_past == before.n_past);
    CHECK(now.logits == before.logits);
  };
  auto expect_error = [&](auto&& call, latte::ErrorCode code, const std::string& text) {
    try {
      call();
      FAIL("no error for: " << text);
    } catch (const latte::Error& e) {
      CHECK(e.code() == code);
      CHECK_MESSAGE(std::string(e.what()).find(text) != std::string::npos, e.what());
    }
    expect_unchanged();
  };
  const Token ok[] = {1, 2, 3};
  using latte::ErrorCode;
  expect_error([&] { latte::decode_batch({}, {}); }, ErrorCode::invalid_argument, "no sessions");
  expect_error([&] { latte::decode_batch(abc, std::span(ok).first(2)); }, ErrorCode::invalid_argument,
               "3 sessions but 2 token lists");
  Session* const with_null[] = {&a, nullptr};
  expect_error([&] { latte::decode_batch(with_null, std::span(ok).first(2)); }, ErrorCode::invalid_argument,
               "session 1 is null");
  Session* const repeated[] = {&a, &b, &a};
  expect_error([&] { latte::decode_batch(repeated, ok); }, ErrorCode::invalid_argument, "session 2 appears twice");
  const Token bad_id[] = {1, V, 3};
  expect_error([&] { latte::decode_batch(abc, bad_id); }, ErrorCode::invalid_argument,
               "session 1: token id " + std::to_string(V) + " at index 0 is outside the vocabulary");
  const Token negative[] = {1, 2, -1};
  expect_error([&] { latte::decode_batch(abc, negative); }, ErrorCode::invalid_argument, "session 2: token id -1");
  const std::vector<Token> two{4, 5}, none;
  const std::span<const Token> with_empty[] = {two, none, two};
  expect_error([&] { latte::eval_batch(abc, with_empty); }, ErrorCode::invalid_argument, "session 1: no tokens");
  // c holds 2 of its 3 tokens: one more fits, two do not.
  const std::span<const Token> overflow[] = {two, two, two};
  expect_error([&] { latte::eval_batch(abc, overflow); }, ErrorCode::context_overflow,
               "session 2: 2 cached + 2 new tokens exceed n_ctx 3");

  // Another model (even with the same config) and another backend are refused too.
  const latte::Model other = latte::test::random_model("test-v2-lite");
  Session d(other, params(8));
  d.eval(latte::test::fresh_tokens(1, V));
  Session* const mixed_models[] = {&a, &d};
  expect_error([&] { latte::decode_batch(mixed_models, std::span(ok).first(2)); }, ErrorCode::invalid_argument,
               "session 1 runs a different model");
  const std::string other_backend = latte::test::attention_backend() == "mla" ? "standard" : "mla";
  Session e(m, {.n_ctx = 8, .attention = other_backend});
  e.eval(latte::test::fresh_tokens(1, V));
  Session* const mixed_backends[] = {&a, &e};
  expect_error([&] { latte::decode_batch(mixed_backends, std::span(ok).first(2)); }, ErrorCode::invalid_argument,
               "uses attention backend '" + other_backend + "'");

  // After all that, a valid batch still runs and every session moves by one token.
  latte::decode_batch(abc, ok);
  CHECK(a.n_past() == 3);
  CHECK(b.n_past() == 3);
  CHECK(c.n_past() == 3);
}
