// Session::fork (independent copies of a conversation) and Session::eval_reusing_prefix (multi-turn
// chat evaluates only what changed). Evaluated tokens are counted by a host backend that wraps the
// one under test, independently of the count eval_reusing_prefix returns.
#include "support/random_models.hpp"
#include "support/test_options.hpp"

#include <latte/attention.hpp>
#include <latte/error.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr double kFp32Tolerance = 1e-5;

std::vector<latte::Token> concat(std::initializer_list<std::span<const latte::Token>> parts) {
  std::vector<latte::Token> out;
  for (auto p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::vector<latte::Token> held(const latte::Session& s) { return {s.tokens().begin(), s.tokens().end()}; }

std::vector<float> last_logits_of_fresh(const latte::Model& model, std::span<const latte::Token> tokens) {
  latte::Session s(model, {.n_ctx = 256, .attention = latte::test::attention_backend()});
  s.eval(tokens);
  return {s.logits().begin(), s.logits().end()};
}

/// Wraps a built-in backend and counts the token rows its layer-0 forward receives.
class RowCountingBackend final : public latte::AttentionBackend {
 public:
  RowCountingBackend(std::unique_ptr<latte::AttentionBackend> inner, int* rows)
      : inner_(std::move(inner)), rows_(rows) {}
  std::string_view name() const noexcept override { return "row-counting"; }
  latte::KvLayout kv_layout() const override { return inner_->kv_layout(); }
  void prepare(std::span<const latte::AttentionLayerWeights> layers) override { inner_->prepare(layers); }
  void forward(const latte::AttentionInput& in) override {
    if (in.layer == 0) *rows_ += in.n_rows;
    inner_->forward(in);
  }

 private:
  std::unique_ptr<latte::AttentionBackend> inner_;
  int* rows_;
};

/// Registers "row-counting" (wrapping the backend under test) for the scope.
class CountingScope {
 public:
  CountingScope() {
    const std::string inner = latte::test::attention_backend();
    int* rows = &rows_;
    latte::AttentionRegistry::instance().add(
        {.name = "row-counting",
         .description = "counts evaluated rows (test)",
         .supports = [](const latte::ModelConfig&, latte::Device d) { return d.is_cpu(); },
         .create = [inner, rows](const latte::ModelConfig& c,
                                 latte::Device d) -> std::unique_ptr<latte::AttentionBackend> {
           return std::make_unique<RowCountingBackend>(latte::AttentionRegistry::instance().create(inner, c, d), rows);
         }});
  }
  ~CountingScope() { latte::AttentionRegistry::instance().remove("row-counting"); }
  CountingScope(const CountingScope&) = delete;
  CountingScope& operator=(const CountingScope&) = delete;
  /// Rows evaluated since the last call.
  int take() { return std::exchange(rows_, 0); }

 private:
  int rows_ = 0;
};

}  // namespace

TEST_CASE("forked sessions continue independently and each equals a fresh replay") {
  for (std::string_view flavour : {"test-v3", "test-glm-dsa"}) {
    CAPTURE(flavour);
    const latte::Model model = latte::test::shared_random_model(flavour);
    const int n_vocab = model.config().n_vocab;
    const auto prompt = latte::test::fresh_tokens(9, n_vocab);
    const auto left = latte::test::fresh_tokens(4, n_vocab);
    const auto right = latte::test::fresh_tokens(6, n_vocab);

    latte::Session a(model, {.n_ctx = 64, .attention = latte::test::attention_backend()});
    a.eval(prompt);
    latte::Session b = a.fork();
    CHECK(b.n_past() == 9);
    CHECK(held(b) == prompt);
    CHECK(b.backend_name() == a.backend_name());
    CHECK(b.n_ctx() == 64);
    CHECK(std::vector<float>(b.logits().begin(), b.logits().end()) ==
          std::vector<float>(a.logits().begin(), a.logits().end()));

    a.eval(std::span(left).first(2));
    b.eval(right);
    a.eval(std::span(left).subspan(2));
    CHECK(held(a) == concat({prompt, left}));
    CHECK(held(b) == concat({prompt, right}));
    CHECK(latte::test::relative_error(a.logits(), last_logits_of_fresh(model, concat({prompt, left}))) <=
          kFp32Tolerance);
    CHECK(latte::test::relative_error(b.logits(), last_logits_of_fresh(model, concat({prompt, right}))) <=
          kFp32Tolerance);

    // A fork of a fork, then the original rewinds: none affects the others.
    latte::Session c = b.fork();
    b.truncate(3);
    b.eval(left);
    c.eval(left);
    CHECK(held(c) == concat({prompt, right, left}));
    CHECK(held(b) == concat({std::span(prompt).first(3), left}));
    CHECK(latte::test::relative_error(c.logits(), last_logits_of_fresh(model, concat({prompt, right, left}))) <=
          kFp32Tolerance);
    CHECK(latte::test::relative_error(
              b.logits(), last_logits_of_fresh(model, concat({std::span(prompt).first(3), left}))) <= kFp32Tolerance);
  }
}

TEST_CASE("eval_reusing_prefix evaluates only the tokens after the common prefix") {
  CountingScope counting;
  const latte::Model model = latte::test::shared_random_model("test-v3");
  const auto turn1 = latte::test::fresh_tokens(14, 512);
  const auto reply = latte::test::fresh_tokens(5, 512);
  const auto turn2 = latte::test::fresh_tokens(7, 512);
  latte::Session s(model, {.n_ctx = 128, .attention = "row-counting"});

  CHECK(s.eval_reusing_prefix(turn1) == 14);
  CHECK(counting.take() == 14);
  for (latte::Token t : reply) s.eval(std::span(&t, 1));  // the "generated" reply
  CHECK(counting.take() == 5);

  // Next turn: the whole conversation again; only turn2 runs.
  auto conversation = concat({turn1, reply, turn2});
  CHECK(s.eval_reusing_prefix(conversation) == 7);
  CHECK(counting.take() == 7);
  CHECK(std::vector<latte::Token>(s.tokens().begin(), s.tokens().end()) == conversation);
  CHECK(latte::test::relative_error(s.logits(), last_logits_of_fresh(model, conversation)) <= kFp32Tolerance);

  // The same tokens again: nothing runs, the logits stay.
  CHECK(s.eval_reusing_prefix(conversation) == 0);
  CHECK(counting.take() == 0);

  // The reply re-tokenized differently from position 16 on: the rest is re-evaluated.
  conversation[16] = (conversation[16] + 1) % 512;
  CHECK(s.eval_reusing_prefix(conversation) == static_cast<int>(conversation.size()) - 16);
  CHECK(counting.take() == static_cast<int>(conversation.size()) - 16);
  CHECK(latte::test::relative_error(s.logits(), last_logits_of_fresh(model, conversation)) <= kFp32Tolerance);

  // A strict prefix of what is held: its last token runs again to give its logits.
  const auto prefix = std::span(conversation).first(10);
  CHECK(s.eval_reusing_prefix(prefix) == 1);
  CHECK(counting.take() == 1);
  CHECK(s.n_past() == 10);
  CHECK(latte::test::relative_error(s.logits(), last_logits_of_fresh(model, prefix)) <= kFp32Tolerance);

  // Nothing in common: a full evaluation.
  std::vector<latte::Token> other = latte::test::fresh_tokens(6, 512);
  other[0] = (conversation[0] + 1) % 512;
  CHECK(s.eval_reusing_prefix(other) == 6);
  CHECK(counting.take() == 6);
  CHECK(latte::test::relative_error(s.logits(), last_logits_of_fresh(model, other)) <= kFp32Tolerance);
}

TEST_CASE("eval_reusing_prefix rejects bad input before changing anything") {
  const latte::Model model = latte::test::shared_random_model("test-v3");
  const auto tokens = latte::test::fresh_tokens(8, 512);
  latte::Session s(model, {.n_ctx = 10, .attention = latte::test::attention_backend()});
  s.eval(tokens);
  const std::vector<float> before(s.logits().begin(), s.logits().end());
  auto bad = tokens;
  bad[5] = 512;
  const auto code_of = [&](std::span<const latte::Token> t) {
    try {
      (void)s.eval_reusing_prefix(t);
    } catch (const latte::Error& e) {
      return e.code();
    }
    return latte::ErrorCode::internal;
  };
  CHECK(code_of(bad) == latte::ErrorCode::invalid_argument);
  CHECK(code_of({}) == latte::ErrorCode::invalid_argument);
  CHECK(code_of(latte::test::fresh_tokens(11, 512)) == latte::ErrorCode::context_overflow);
  CHECK(s.n_past() == 8);
  CHECK(std::vector<float>(s.logits().begin(), s.logits().end()) == before);
}
