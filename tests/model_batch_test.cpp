// One forward batch may carry new tokens of several sequences, each with its own cache (batched
// decode of several sessions): the result equals running each sequence alone.
#include "cpu/thread_pool.hpp"
#include "model/architecture.hpp"
#include "model/forward.hpp"
#include "model/model_state.hpp"
#include "session/kv_cache.hpp"
#include "support/random_models.hpp"
#include "support/test_options.hpp"

#include <latte/attention.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>

namespace {

std::vector<float> session_logits(const latte::Model& m, const std::vector<latte::Token>& prompt,
                                  const std::vector<latte::Token>& next) {
  latte::Session s(m, {.n_ctx = 64, .attention = latte::test::attention_backend()});
  s.eval(prompt);
  s.eval(next);
  return {s.logits().begin(), s.logits().end()};
}

}  // namespace

TEST_CASE("a batch of several sequences gives each sequence's own results") {
  for (const char* preset : {"test-glm-dsa", "test-v2-lite"}) {
    CAPTURE(preset);
    const latte::Model m = latte::test::shared_random_model(preset);
    const latte::ModelConfig& c = m.config();
    auto backend = latte::AttentionRegistry::instance().create(latte::test::attention_backend(), c, m.device());
    backend->prepare(m.state().weights.attention_weights());
    latte::cpu::ThreadPool pool(2);
    const latte::TaskRunner runner = pool.runner();
    auto forward = latte::detail::architecture_ops(c.arch).create_cpu_forward(m.state(), *backend, runner);
    const int indexer_dim = c.has_indexer() ? c.indexer.head_dim : 0;
    latte::detail::KvCache a(c.n_layer_main(), backend->kv_layout(), indexer_dim, 64);
    latte::detail::KvCache b(c.n_layer_main(), backend->kv_layout(), indexer_dim, 64);

    // Prompts run alone: 20 tokens (past the indexer's top_k of 16) and 7 tokens.
    const auto prompt_a = latte::test::fresh_tokens(20, c.n_vocab), prompt_b = latte::test::fresh_tokens(7, c.n_vocab);
    const size_t V = static_cast<size_t>(c.n_vocab);
    std::vector<float> ignored(V);
    const std::vector<int> last_a{19}, last_b{6};
    for (auto [cache, prompt, last] : {std::tuple{&a, &prompt_a, &last_a}, std::tuple{&b, &prompt_b, &last_b}}) {
      const latte::detail::BatchSequence seq{
          .cache = cache, .first_row = 0, .n_tokens = static_cast<int>(prompt->size())};
      forward->run({.tokens = *prompt, .sequences = std::span(&seq, 1), .logit_rows = *last, .logits = ignored.data()});
    }
    // Then one step with 2 new tokens of a and 1 of b in the same batch.
    const auto next_a = latte::test::fresh_tokens(2, c.n_vocab), next_b = latte::test::fresh_tokens(1, c.n_vocab);
    const std::vector<latte::Token> tokens{next_a[0], next_a[1], next_b[0]};
    const latte::detail::BatchSequence seqs[] = {{.cache = &a, .first_row = 0, .n_tokens = 2},
                                                 {.cache = &b, .first_row = 2, .n_tokens = 1}};
    const std::vector<int> rows{1, 2};
    std::vector<float> logits(2 * V);
    forward->run({.tokens = tokens, .sequences = seqs, .logit_rows = rows, .logits = logits.data()});
    CHECK(a.n_tokens() == 22);
    CHECK(b.n_tokens() == 8);

    const auto alone_a = session_logits(m, prompt_a, next_a), alone_b = session_logits(m, prompt_b, next_b);
    CHECK(latte::test::relative_error(std::span(logits).first(V), alone_a) <= 1e-5);
    CHECK(latte::test::relative_error(std::span(logits).subspan(V, V), alone_b) <= 1e-5);
  }
}
