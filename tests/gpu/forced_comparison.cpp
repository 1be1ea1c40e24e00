#include "forced_comparison.hpp"

#include "support/random_models.hpp"

#include <latte/session.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace latte::test::gpu {

RecordedRun run_recording(const Model& model, const std::string& backend, std::span<const Token> prompt,
                          std::span<const Token> decode, TapObserver inner) {
  RecordedRun run{.logits = {}, .decisions = std::make_unique<DecisionRecorder>(std::move(inner))};
  Session s(model, {.n_ctx = 512, .attention = backend, .logits_all = true});
  s.set_tap_observer(run.decisions->observer());
  s.eval(prompt);
  for (int i = 0; i < static_cast<int>(prompt.size()); ++i) {
    const auto l = s.logits(i);
    run.logits.insert(run.logits.end(), l.begin(), l.end());
  }
  for (Token t : decode) {
    s.eval(std::span(&t, 1));
    const auto l = s.logits();
    run.logits.insert(run.logits.end(), l.begin(), l.end());
  }
  return run;
}

std::vector<float> forced_reference(const Model& cpu_model, std::span<const Token> prompt,
                                    std::span<const Token> decode, RecordedRun& run) {
  CpuStepRun cpu(cpu_model, "mla", 512);
  return run_steps(cpu, prompt, decode, &run.decisions->decisions());
}

int first_flip(const detail::ForcedDecisions& forced) {
  int first = -1;
  for (const detail::DecisionCheck& c : forced.checks()) {
    if (c.tie.differing > 0) first = first < 0 ? c.position : std::min(first, c.position);
  }
  return first;
}

size_t expected_checks(const ModelConfig& config, int n_positions, detail::DecisionKind kind) {
  if (kind == detail::DecisionKind::selection) {
    return config.has_indexer() ? static_cast<size_t>(config.n_layer_main()) *
                                      static_cast<size_t>(std::max(0, n_positions - config.indexer.top_k))
                                : 0;
  }
  size_t moe = 0;
  for (int il = 0; il < config.n_layer_main(); ++il) moe += config.is_moe_layer(il) ? 1 : 0;
  return moe * static_cast<size_t>(n_positions);
}

bool check_forced(const RecordedRun& run, std::span<const float> reference, const std::string& label,
                  const ModelConfig& config, int n_positions, double tol) {
  const detail::ForcedDecisions& forced = run.decisions->decisions();
  const auto errors = position_errors(run.logits, reference, config.n_vocab);
  int over = 0, worst_at = 0;
  for (size_t p = 0; p < errors.size(); ++p) {
    over += errors[p] <= tol ? 0 : 1;  // NaN counts as over
    if (errors[p] > errors[static_cast<size_t>(worst_at)] || std::isnan(errors[p])) worst_at = static_cast<int>(p);
  }
  const double overall = relative_error(run.logits, reference);
  std::printf("%s: logits error %.3g, worst position %d: %.3g (bound %.0e), %d of %zu positions over\n", label.c_str(),
              overall, worst_at, errors.empty() ? 0.0 : errors[static_cast<size_t>(worst_at)], tol, over,
              errors.size());
  std::printf("    decisions replayed on the CPU: %s\n", forced.summary().c_str());
  const bool finite = std::all_of(run.logits.begin(), run.logits.end(), [](float x) { return std::isfinite(x); });
  const size_t experts = expected_checks(config, n_positions, detail::DecisionKind::experts);
  const size_t selection = expected_checks(config, n_positions, detail::DecisionKind::selection);
  INFO(label);
  INFO(forced.summary());
  CHECK(finite);
  CHECK(over == 0);
  CHECK(forced.failures().empty());
  CHECK(forced.n_checked(detail::DecisionKind::experts) == experts);
  CHECK(forced.n_checked(detail::DecisionKind::selection) == selection);
  return finite && over == 0 && forced.failures().empty() &&
         forced.n_checked(detail::DecisionKind::experts) == experts &&
         forced.n_checked(detail::DecisionKind::selection) == selection;
}

}  // namespace latte::test::gpu
