// Forced decisions on the CPU forward pass (model/forced_decisions.hpp): replaying the pass's own
// expert and index choices changes nothing, a different choice changes the logits from its position
// on (so the pass really uses it), and the near-tie check accepts ties and rejects far-off choices.
#include "model/expert_router.hpp"
#include "model/forced_decisions.hpp"
#include "model/glm_dsa.hpp"
#include "support/decision_replay.hpp"
#include "support/random_models.hpp"
#include "support/test_options.hpp"

#include <latte/error.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

using latte::detail::DecisionKind;
using latte::detail::ExpertChoice;
using latte::detail::ExpertRouter;
using latte::detail::RouterParams;

struct Flavour {
  const char* preset;
  int prompt;  // 0: 3 * top_k (glm-dsa: sparse attention in play)
};
constexpr Flavour kFlavours[] = {{"test-v3", 10}, {"test-v2-lite", 9}, {"test-glm-dsa", 0}};
constexpr int kDecode = 2;

struct Recorded {
  std::vector<float> logits;  // [prompt + decode, vocab]
  latte::test::DecisionRecorder decisions;
};

/// The pass's own run (prompt in one step, then one step per decoded token), its decisions recorded.
void run_own(const latte::Model& m, std::span<const latte::Token> prompt, std::span<const latte::Token> decode,
             Recorded& out) {
  latte::test::CpuStepRun run(m, latte::test::attention_backend(), 128);
  const latte::TapObserver observer = out.decisions.observer();
  out.logits = run.eval(prompt, nullptr, &observer);
  for (size_t i = 0; i < decode.size(); ++i) {
    const auto l = run.eval(decode.subspan(i, 1), nullptr, &observer);
    out.logits.insert(out.logits.end(), l.begin(), l.end());
  }
}

int n_moe_layers(const latte::ModelConfig& c) {
  int n = 0;
  for (int il = 0; il < c.n_layer_main(); ++il) n += c.is_moe_layer(il) ? 1 : 0;
  return n;
}

std::vector<float> random_values(size_t n, std::mt19937_64& rng, float sigma) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<int32_t> own_experts(const ExpertRouter& r, const std::vector<float>& logits,
                                 const std::vector<float>& bias) {
  std::vector<ExpertChoice> c(static_cast<size_t>(r.params().n_used));
  r.route(logits, bias, c);
  std::vector<int32_t> ids;
  for (const ExpertChoice& x : c) ids.push_back(x.expert);
  return ids;
}

}  // namespace

TEST_CASE("forcing the CPU pass's own decisions gives bit-identical logits, every decision checked") {
  for (const Flavour f : kFlavours) {
    const latte::Model m = latte::test::shared_random_model(f.preset);
    const latte::ModelConfig& c = m.config();
    const int n_prompt = f.prompt > 0 ? f.prompt : 3 * c.indexer.top_k;
    uint64_t seed = 0;
    const auto tokens = latte::test::fresh_tokens(n_prompt + kDecode, c.n_vocab, &seed);
    CAPTURE(f.preset);
    CAPTURE(seed);
    const std::span<const latte::Token> all(tokens);
    Recorded own;
    run_own(m, all.first(static_cast<size_t>(n_prompt)), all.subspan(static_cast<size_t>(n_prompt)), own);
    const int n_pos = n_prompt + kDecode;
    const int n_sparse = c.has_indexer() ? n_pos - c.indexer.top_k : 0;  // positions with more than top_k keys
    REQUIRE(own.decisions.size() ==
            static_cast<size_t>(n_moe_layers(c) * n_pos + (c.has_indexer() ? c.n_layer_main() * n_pos : 0)));

    latte::test::CpuStepRun forced_run(m, latte::test::attention_backend(), 128);
    latte::detail::ForcedDecisions& forced = own.decisions.decisions();
    const auto logits = latte::test::run_steps(forced_run, all.first(static_cast<size_t>(n_prompt)),
                                               all.subspan(static_cast<size_t>(n_prompt)), &forced);
    MESSAGE(forced.summary());
    CHECK(logits == own.logits);
    CHECK(forced.n_checked(DecisionKind::experts) == static_cast<size_t>(n_moe_layers(c) * n_pos));
    CHECK(forced.n_checked(DecisionKind::selection) == static_cast<size_t>(c.n_layer_main() * n_sparse));
    CHECK(forced.n_flipped(DecisionKind::experts) == 0);
    CHECK(forced.n_flipped(DecisionKind::selection) == 0);
    for (const auto& check : forced.checks()) {
      CHECK(check.tie.deficit <= 0.0);
      CHECK(check.tie.margin > 0.0);
    }
    CHECK(forced.failures().empty());
  }
}

TEST_CASE("a forced decision other than the CPU's own changes the logits from its position on") {
  for (const Flavour f : kFlavours) {
    const latte::Model m = latte::test::shared_random_model(f.preset);
    const latte::ModelConfig& c = m.config();
    const int n_prompt = f.prompt > 0 ? f.prompt : 3 * c.indexer.top_k;
    uint64_t seed = 0;
    const auto tokens = latte::test::fresh_tokens(n_prompt + kDecode, c.n_vocab, &seed);
    const std::span<const latte::Token> all(tokens);
    const auto prompt = all.first(static_cast<size_t>(n_prompt));
    const auto decode = all.subspan(static_cast<size_t>(n_prompt));
    for (const DecisionKind kind : {DecisionKind::experts, DecisionKind::selection}) {
      if (kind == DecisionKind::selection && !c.has_indexer()) continue;
      CAPTURE(f.preset);
      CAPTURE(seed);
      CAPTURE(latte::detail::decision_kind_name(kind));
      Recorded own;
      run_own(m, prompt, decode, own);
      latte::detail::ForcedDecisions& forced = own.decisions.decisions();
      // A position in the middle of the prompt (past top_k for a selection); the last MoE layer or
      // the first indexer layer.
      const int position = c.has_indexer() ? c.indexer.top_k + n_prompt / 3 : n_prompt / 2;
      const int layer = kind == DecisionKind::experts ? c.n_layer_main() - 1 : 0;
      REQUIRE((kind == DecisionKind::selection || c.is_moe_layer(layer)));
      const std::vector<int32_t>* values = forced.find(kind, layer, position);
      REQUIRE(values != nullptr);
      std::vector<int32_t> changed = *values;
      // Swap one chosen entry for the first one not chosen (an expert id, or a causal position).
      const int range = kind == DecisionKind::experts ? c.n_expert : position + 1;
      int32_t outside = 0;
      while (std::find(changed.begin(), changed.end(), outside) != changed.end()) ++outside;
      REQUIRE(outside < range);
      changed[0] = outside;
      forced.force(kind, layer, position, changed);

      latte::test::CpuStepRun run(m, latte::test::attention_backend(), 128);
      const auto logits = latte::test::run_steps(run, prompt, decode, &forced);
      MESSAGE(forced.summary());
      const auto errors = latte::test::position_errors(logits, own.logits, c.n_vocab);
      // Causal: earlier positions keep their logits up to fp32 summation order (an expert's product
      // over a different set of rows may block its sums differently).
      double before = 0.0;
      for (int p = 0; p < position; ++p) before = std::max(before, errors[static_cast<size_t>(p)]);
      MESSAGE("largest error before the change ", before, ", at it ", errors[static_cast<size_t>(position)]);
      CHECK(before <= 1e-5);
      CHECK(errors[static_cast<size_t>(position)] > 1e-3);  // far above fp32 noise: the forced choice is used
      // The changed decision is checked as a flip; the recorded decisions after it may be flips too
      // (the state they were taken on has changed), those before it are not.
      int seen = 0;
      for (const auto& check : forced.checks()) {
        if (check.position < position) CHECK(check.tie.differing == 0);
        if (check.kind == kind && check.layer == layer && check.position == position) {
          ++seen;
          CHECK(check.tie.differing == 1);
          CHECK(check.tie.deficit >= 0.0);  // a choice the CPU did not make is at most as good as its own
        }
      }
      CHECK(seen == 1);
    }
  }
}

TEST_CASE("the router's near-tie check accepts a tie at the k-th expert and rejects a far-off choice") {
  std::mt19937_64 rng(std::random_device{}());
  for (const RouterParams p : {RouterParams{.gating = latte::ExpertGating::softmax, .n_expert = 8, .n_used = 2},
                               RouterParams{.gating = latte::ExpertGating::sigmoid,
                               .n_expert = 16,
                               .n_used = 4,
                               .n_group = 4,
                               .n_group_used = 2,
                               .normalize = true,
                               .scale = 2.5f}}) {
    CAPTURE(p.n_expert);
    const ExpertRouter router(p);
    // Random scores for which the k-th chosen expert's group keeps an unchosen member (the tie below
    // needs one; with groups, all of a group can be chosen).
    const int per_group = p.n_expert / p.n_group;
    std::vector<float> logits, bias;
    std::vector<int32_t> own;
    int kth = -1, twin = -1;
    for (int attempt = 0; attempt < 1000 && twin < 0; ++attempt) {
      logits = random_values(static_cast<size_t>(p.n_expert), rng, 1.0f);
      bias = p.gating == latte::ExpertGating::sigmoid ? random_values(logits.size(), rng, 0.05f) : std::vector<float>{};
      own = own_experts(router, logits, bias);
      kth = own.back();
      for (int e = (kth / per_group) * per_group; e < (kth / per_group + 1) * per_group; ++e) {
        if (std::find(own.begin(), own.end(), e) == own.end()) twin = e;
      }
    }
    REQUIRE(twin >= 0);
    std::vector<ExpertChoice> expected(own.size()), got(own.size());
    router.route(logits, bias, expected);

    // The own choice forced: nothing differs, same weights in the same order.
    const auto same = router.route_forced(logits, bias, own, got, "test");
    CHECK(same.differing == 0);
    CHECK(same.deficit <= 0.0);
    CHECK(same.holds());
    for (size_t i = 0; i < got.size(); ++i) {
      CHECK(got[i].expert == expected[i].expert);
      CHECK(got[i].weight == expected[i].weight);
    }

    // A real tie: an unchosen expert of the same group as the k-th gets the k-th's exact selection
    // value, then forcing it instead of the k-th is a near-tie (ties go to the lower index).
    auto tied_logits = logits;
    auto tied_bias = bias;
    tied_logits[static_cast<size_t>(twin)] = logits[static_cast<size_t>(kth)];
    if (!bias.empty()) tied_bias[static_cast<size_t>(twin)] = bias[static_cast<size_t>(kth)];
    // Of the two tied experts the router takes the lower index; forcing the other is the flip.
    std::vector<int32_t> with_twin = own_experts(router, tied_logits, tied_bias);
    const bool kth_kept = std::find(with_twin.begin(), with_twin.end(), kth) != with_twin.end();
    REQUIRE((kth_kept || std::find(with_twin.begin(), with_twin.end(), twin) != with_twin.end()));
    std::replace(with_twin.begin(), with_twin.end(), kth_kept ? kth : twin, kth_kept ? twin : kth);
    const auto tie = router.route_forced(tied_logits, tied_bias, with_twin, got, "test");
    CHECK(tie.differing == 1);
    CHECK(tie.deficit <= 0.0);
    CHECK(tie.holds());

    // Far off: the n_used experts the router likes least.
    std::vector<int32_t> order(static_cast<size_t>(p.n_expert));
    std::iota(order.begin(), order.end(), 0);
    std::vector<float> value(logits.size());
    for (size_t e = 0; e < value.size(); ++e) value[e] = logits[e] + (bias.empty() ? 0.0f : 4.0f * bias[e]);
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return value[static_cast<size_t>(a)] < value[static_cast<size_t>(b)]; });
    const std::vector<int32_t> worst(order.begin(), order.begin() + p.n_used);
    const auto far = router.route_forced(logits, bias, worst, got, "test");
    INFO("deficit ", far.deficit, " margin ", far.margin);
    CHECK(far.differing == p.n_used);
    CHECK_FALSE(far.holds());

    // Bad forced ids are errors naming where.
    std::vector<int32_t> twice = own;
    twice[1] = twice[0];
    std::vector<int32_t> beyond = own;
    std::replace(beyond.begin(), beyond.end(), own.front(), p.n_expert);
    const std::vector<int32_t> short_list(own.begin(), own.end() - 1);
    for (const auto& bad : {twice, beyond, short_list}) {
      try {
        (void)router.route_forced(logits, bias, bad, got, "blk.3 position 9");
        FAIL("a bad forced expert list must throw");
      } catch (const latte::Error& e) {
        CHECK(e.code() == latte::ErrorCode::invalid_argument);
        CHECK(std::string(e.what()).find("blk.3 position 9") != std::string::npos);
      }
    }
  }
}

TEST_CASE("the selection's near-tie check accepts a tie at the k-th position and rejects a far-off choice") {
  std::mt19937_64 rng(std::random_device{}());
  const int n = 40, top_k = 16;
  auto scores = random_values(static_cast<size_t>(n), rng, 3.0f);
  std::vector<int32_t> own(top_k), out(top_k);
  latte::detail::select_top_positions(scores, top_k, own);
  auto by_score = [&](int32_t a, int32_t b) { return scores[static_cast<size_t>(a)] < scores[static_cast<size_t>(b)]; };
  const int32_t kth = *std::min_element(own.begin(), own.end(), by_score);
  int32_t outside = 0;
  while (std::find(own.begin(), own.end(), outside) != own.end()) ++outside;

  const auto same = latte::detail::force_selection(scores, top_k, own, out, "test");
  CHECK(same.differing == 0);
  CHECK(same.deficit <= 0.0);
  CHECK(out == own);

  scores[static_cast<size_t>(outside)] = scores[static_cast<size_t>(kth)];  // an exact tie at the k-th
  std::vector<int32_t> swapped = own;
  std::replace(swapped.begin(), swapped.end(), kth, outside);
  std::reverse(swapped.begin(), swapped.end());  // order does not matter; out comes ascending
  const auto tie = latte::detail::force_selection(scores, top_k, swapped, out, "test");
  CHECK(tie.differing == (outside < kth ? 0 : 1));  // ties go to the lower position
  CHECK(tie.holds());
  CHECK(std::is_sorted(out.begin(), out.end()));

  std::vector<int32_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  std::sort(all.begin(), all.end(), by_score);
  const std::vector<int32_t> worst(all.begin(), all.begin() + top_k);
  const auto far = latte::detail::force_selection(scores, top_k, worst, out, "test");
  INFO("deficit ", far.deficit, " margin ", far.margin);
  CHECK_FALSE(far.holds());

  std::vector<int32_t> twice = own;
  twice[1] = twice[0];
  std::vector<int32_t> beyond = own;
  std::replace(beyond.begin(), beyond.end(), own.front(), n);
  const std::vector<int32_t> short_list(own.begin(), own.end() - 1);
  for (const auto& bad : {twice, beyond, short_list}) {
    CHECK_THROWS_AS((void)latte::detail::force_selection(scores, top_k, bad, out, "blk.0 position 39"), latte::Error);
  }
}

TEST_CASE("bf16 ulps and the near-tie margin") {
  CHECK(latte::detail::bf16_ulp(1.0) == std::ldexp(1.0, -7));
  CHECK(latte::detail::bf16_ulp(1.99) == std::ldexp(1.0, -7));
  CHECK(latte::detail::bf16_ulp(-2.0) == std::ldexp(1.0, -6));
  CHECK(latte::detail::bf16_ulp(0.3) == std::ldexp(1.0, -9));
  CHECK(latte::detail::bf16_ulp(0.0) > 0.0);
  CHECK(latte::detail::near_tie_margin(0.5) == latte::detail::kNearTieUlps * std::ldexp(1.0, -8));
}

TEST_CASE("bad forced decisions are errors naming the block and position") {
  const latte::Model m = latte::test::shared_random_model("test-glm-dsa");
  const latte::ModelConfig& c = m.config();
  const auto tokens = latte::test::fresh_tokens(c.indexer.top_k + 4, c.n_vocab);
  int moe = 0;
  while (!c.is_moe_layer(moe)) ++moe;
  struct Bad {
    DecisionKind kind;
    int layer, position;
    std::vector<int32_t> values;
    const char* message;
  };
  std::vector<int32_t> far_position(static_cast<size_t>(c.indexer.top_k), -1);
  std::iota(far_position.begin(), far_position.end() - 1, 0);
  far_position.back() = c.indexer.top_k + 3;  // beyond the causal positions of position top_k + 1
  std::vector<int32_t> experts(static_cast<size_t>(c.n_expert_used));
  std::iota(experts.begin(), experts.end(), c.n_expert - c.n_expert_used + 1);  // the last id is n_expert
  for (const Bad& bad : {Bad{DecisionKind::experts, moe, 5, experts, "is outside [0, "},
                         Bad{DecisionKind::selection, 0, c.indexer.top_k + 1, far_position, "outside the row's"}}) {
    CAPTURE(latte::detail::decision_kind_name(bad.kind));
    latte::detail::ForcedDecisions forced;
    forced.force(bad.kind, bad.layer, bad.position, bad.values);
    latte::test::CpuStepRun run(m, latte::test::attention_backend(), 64);
    try {
      (void)run.eval(tokens, &forced);
      FAIL("a bad forced decision must throw");
    } catch (const latte::Error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(e.code() == latte::ErrorCode::invalid_argument);
      CHECK(what.find("blk." + std::to_string(bad.layer) + " position " + std::to_string(bad.position)) !=
            std::string::npos);
      CHECK(what.find(bad.message) != std::string::npos);
    }
  }
}
