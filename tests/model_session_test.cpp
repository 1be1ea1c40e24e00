// Session behaviour: input validation before anything runs, context limits, truncate/reset, model
// lifetime, thread-count independence.
#include "model/presets.hpp"
#include "support/random_models.hpp"
#include "support/test_options.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>

#include <optional>
#include <string>

namespace {

constexpr double kFp32Tolerance = 1e-5;

const latte::Model& shared_model() {
  static const latte::Model model = latte::test::shared_random_model("test-glm-flash");
  return model;
}

latte::Error error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const latte::Error& e) {
    return e;
  }
  FAIL("no latte::Error thrown");
  return latte::Error(latte::ErrorCode::internal, "");
}

std::vector<float> copy(std::span<const float> s) { return {s.begin(), s.end()}; }

}  // namespace

TEST_CASE("token ids outside the vocabulary are rejected before anything runs") {
  latte::Session s(shared_model(), {.n_ctx = 64, .attention = latte::test::attention_backend()});
  s.eval(std::vector<latte::Token>{1, 2, 3});
  const auto before = copy(s.logits());
  for (latte::Token bad : {512, -1, 100000}) {
    const latte::Error e = error_of([&] { s.eval(std::vector<latte::Token>{4, bad, 5}); });
    CHECK(e.code() == latte::ErrorCode::invalid_argument);
    const std::string msg = e.what();
    CHECK(msg.find("token id " + std::to_string(bad)) != std::string::npos);
    CHECK(msg.find("[0, 512)") != std::string::npos);
    CHECK(s.n_past() == 3);
    CHECK(copy(s.logits()) == before);
  }
  CHECK(error_of([&] { s.eval({}); }).code() == latte::ErrorCode::invalid_argument);
}

TEST_CASE("a context overflow changes nothing and the session continues exactly") {
  const auto tokens = latte::test::fresh_tokens(10, 512);
  latte::Session s(shared_model(), {.n_ctx = 10, .attention = latte::test::attention_backend()});
  s.eval(std::span(tokens).first(7));
  const latte::Error e = error_of([&] {
    s.eval(std::span(tokens).subspan(7));
    s.eval(std::span(tokens).first(1));
  });
  CHECK(e.code() == latte::ErrorCode::context_overflow);
  CHECK(std::string(e.what()).find("n_ctx 10") != std::string::npos);
  CHECK(s.n_past() == 10);  // the first eval of 3 fit; the second of 1 did not
  CHECK(error_of([&] { s.eval(std::span(tokens).first(1)); }).code() == latte::ErrorCode::context_overflow);
  CHECK(s.n_past() == 10);

  latte::Session fresh(shared_model(), {.n_ctx = 10, .attention = latte::test::attention_backend()});
  fresh.eval(tokens);
  CHECK(latte::test::relative_error(s.logits(), fresh.logits()) <= kFp32Tolerance);
}

TEST_CASE("truncate and reset continue as a fresh session would") {
  const auto a = latte::test::fresh_tokens(12, 512);
  const auto b = latte::test::fresh_tokens(5, 512);
  latte::Session s(shared_model(), {.n_ctx = 64, .attention = latte::test::attention_backend()});
  s.eval(a);
  s.truncate(7);
  CHECK(s.n_past() == 7);
  s.eval(b);

  std::vector<latte::Token> expected(a.begin(), a.begin() + 7);
  expected.insert(expected.end(), b.begin(), b.end());
  latte::Session fresh(shared_model(), {.n_ctx = 64, .attention = latte::test::attention_backend()});
  fresh.eval(expected);
  CHECK(latte::test::relative_error(s.logits(), fresh.logits()) <= kFp32Tolerance);

  s.reset();
  CHECK(s.n_past() == 0);
  s.eval(expected);
  CHECK(latte::test::relative_error(s.logits(), fresh.logits()) <= kFp32Tolerance);
  CHECK(error_of([&] { s.truncate(100); }).code() == latte::ErrorCode::invalid_argument);
}

TEST_CASE("logits are available per position only with logits_all") {
  const auto t = latte::test::fresh_tokens(4, 512);
  latte::Session s(shared_model(), {.attention = latte::test::attention_backend()});
  CHECK(error_of([&] { (void)s.logits(); }).code() == latte::ErrorCode::invalid_argument);
  s.eval(t);
  CHECK(s.logits(3).data() == s.logits().data());
  CHECK(error_of([&] { (void)s.logits(1); }).code() == latte::ErrorCode::invalid_argument);
  CHECK(error_of([&] { (void)s.logits(4); }).code() == latte::ErrorCode::invalid_argument);

  latte::Session all(shared_model(), {.attention = latte::test::attention_backend(), .logits_all = true});
  all.eval(t);
  latte::Session prefix(shared_model(), {.attention = latte::test::attention_backend()});
  prefix.eval(std::span(t).first(2));
  CHECK(latte::test::relative_error(all.logits(1), prefix.logits()) <= kFp32Tolerance);
}

TEST_CASE("a session keeps its model alive") {
  std::optional<latte::Session> s;
  {
    latte::Model temporary = latte::test::random_model("test-v2-lite");
    s.emplace(temporary, latte::SessionParams{.attention = latte::test::attention_backend()});
  }
  s->eval(std::vector<latte::Token>{1, 2, 3});
  CHECK(s->logits().size() == 512);
  CHECK(s->model().config().name == "test-v2-lite");
}

TEST_CASE("results do not depend on the thread count") {
  const auto t = latte::test::fresh_tokens(20, 512);
  const auto one = latte::test::all_logits(shared_model(), latte::test::attention_backend(), t, 1);
  const auto three = latte::test::all_logits(shared_model(), latte::test::attention_backend(), t, 3);
  CHECK(latte::test::relative_error(three, one) <= kFp32Tolerance);
}

TEST_CASE("invalid session parameters are rejected") {
  CHECK(error_of([&] { latte::Session(shared_model(), {.n_ctx = 0}); }).code() == latte::ErrorCode::invalid_argument);
  CHECK(error_of([&] { latte::Session(shared_model(), {.n_threads = -2}); }).code() ==
        latte::ErrorCode::invalid_argument);
}

TEST_CASE("a model exposes the tokenizer of its file, and says so when there is none") {
  const auto vocab = latte::gguf::File::open(latte::test::data_path("ggml-vocab-deepseek-llm.gguf"));
  latte::RandomModelOptions options{.seed = 3};
  options.extra_metadata = [&](latte::gguf::Writer& w) {
    for (const auto& kv : vocab.metadata()) {
      if (kv.key.rfind("tokenizer.", 0) == 0) w.set(kv.key, kv.value);
    }
  };
  const latte::Model with = latte::test::random_model(latte::model_preset("test-v2-lite"), options);
  const auto ids = with.tokenizer().encode("Hello world", {.add_special = false});
  CHECK(!ids.empty());
  CHECK(with.tokenizer().decode(ids) == "Hello world");
  const latte::Error none = error_of([&] { (void)shared_model().tokenizer(); });
  CHECK(none.code() == latte::ErrorCode::not_found);
  CHECK(std::string(none.what()).find("no tokenizer") != std::string::npos);
}
