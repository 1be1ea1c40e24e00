// Sessions and threads: several Sessions on one Model run at once and give the results a lone session
// gives; one Session entered from two threads at once reports the overlap as latte::Error instead of
// racing. Its own executable (latte_thread_tests) so that scripts/test.sh can build it, with the
// library alone, under ThreadSanitizer.
#include "support/random_models.hpp"
#include "support/test_options.hpp"

#include <latte/error.hpp>
#include <latte/model.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kVocab = 512;  // test-v2-lite's vocabulary

// Feeds `tokens` in chunks of 4 (a prompt, then follow-ups, as a chat would) and returns the last logits.
std::vector<float> chunked_logits(latte::Session& s, std::span<const latte::Token> tokens) {
  for (size_t i = 0; i < tokens.size(); i += 4) s.eval(tokens.subspan(i, std::min<size_t>(4, tokens.size() - i)));
  const auto logits = s.logits();
  return {logits.begin(), logits.end()};
}

latte::SessionParams one_thread() {
  return {.n_ctx = 64, .attention = latte::test::attention_backend(), .n_threads = 1};
}

}  // namespace

TEST_CASE("sessions on one model run on several threads at once with a lone session's results") {
  const latte::Model model = latte::test::random_model("test-v2-lite", {.seed = 11});
  constexpr int kThreads = 4;
  std::vector<std::vector<latte::Token>> prompts;
  std::vector<std::vector<float>> expected;
  for (int t = 0; t < kThreads; ++t) {
    prompts.push_back(latte::test::fresh_tokens(12 + t, kVocab));
    latte::Session alone(model, one_thread());
    expected.push_back(chunked_logits(alone, prompts.back()));
  }
  std::vector<std::vector<float>> got(kThreads);
  std::vector<std::string> failures(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        // Each thread builds its own session from its own Model copy: copies share one loaded model.
        const latte::Model copy = model;
        latte::Session s(copy, one_thread());
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();  // start the forward passes together
        got[t] = chunked_logits(s, prompts[t]);
      } catch (const std::exception& e) {
        failures[t] = e.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    INFO("thread " << t << ": " << failures[t]);
    REQUIRE(failures[t].empty());
    // Same tokens, same chunks, one thread each: the forward pass is deterministic, so any sharing of
    // state between sessions shows up as a difference in the bits.
    CHECK(got[t] == expected[t]);
  }
}

TEST_CASE("a session entered from a second thread while it runs reports the overlap") {
  const latte::Model model = latte::test::random_model("test-v2-lite", {.seed = 12});
  latte::Session s(model, {.n_ctx = 256, .attention = latte::test::attention_backend(), .n_threads = 1});
  const std::vector<latte::Token> prompt = latte::test::fresh_tokens(60, kVocab);
  std::atomic<bool> done{false};
  std::atomic<int> rejected{0};
  std::atomic<int> other_errors{0};
  const auto count = [&](const latte::Error& e) {
    const std::string what = e.what();
    if (e.code() == latte::ErrorCode::invalid_argument && what.find("in use by another thread") != std::string::npos) {
      rejected.fetch_add(1);
    } else {
      other_errors.fetch_add(1);
    }
  };
  std::thread runner([&] {
    for (int round = 0; round < 4 && rejected.load() == 0; ++round) {
      try {
        s.reset();
        s.eval(prompt);
      } catch (const latte::Error& e) {
        count(e);
      }
    }
    done.store(true);
  });
  // Hammer the session from this thread while the runner evaluates. (Only calls that take the
  // session: logits() reads it without taking it, which would be a real data race here.)
  while (!done.load()) {
    try {
      s.truncate(0);
    } catch (const latte::Error& e) {
      count(e);
    }
  }
  runner.join();
  CHECK(rejected.load() > 0);
  CHECK(other_errors.load() == 0);
  // The session still works after the overlap, from one thread.
  s.reset();
  s.eval(prompt);
  CHECK(s.n_past() == 60);
  CHECK(s.logits().size() == static_cast<size_t>(kVocab));
}
