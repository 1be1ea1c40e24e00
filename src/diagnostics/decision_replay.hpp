// Replaying one pass's discrete decisions on the CPU reference: record the expert_ids and
// index_selection taps of a run (any device) as forced decisions keyed by token position, then run
// the fp32 CPU pass step by step with those decisions forced (model/forced_decisions.hpp). Where the
// decisions were near-ties that flipped, the forced CPU run follows the recorded pass, so the two can
// be compared position by position with a fixed bound.
//
// `latte diagnose --compare cpu:mla,cuda:mla --replay-decisions` and the GPU tests use it.
//
//   latte::detail::DecisionRecorder rec;
//   session.set_tap_observer(rec.observer());  session.eval(prompt);
//   latte::detail::CpuStepRun cpu(cpu_model, "mla", 512);
//   auto logits = cpu.eval(prompt, &rec.decisions());  // rec.decisions().summary(): flips, near-ties
#pragma once

#include "cpu/thread_pool.hpp"
#include "model/forced_decisions.hpp"
#include "model/forward.hpp"
#include "session/kv_cache.hpp"

#include <latte/attention.hpp>
#include <latte/diagnostics.hpp>
#include <latte/model.hpp>
#include <latte/token.hpp>

#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace latte::detail {

/// Collects the decisions of a single-sequence run that starts from an empty cache: each step's
/// token_embd tap gives its first position, its blk.N.expert_ids and blk.N.index_selection taps the
/// decisions of its rows. Every tap is also handed to `inner` (when it has an on_tap and wants it).
class DecisionRecorder {
 public:
  explicit DecisionRecorder(TapObserver inner = {}) : inner_(std::move(inner)) {}
  /// An observer recording into this recorder (which must outlive its use).
  [[nodiscard]] TapObserver observer();
  [[nodiscard]] ForcedDecisions& decisions() noexcept { return decisions_; }
  /// Decisions recorded (rows of expert_ids / index_selection taps).
  [[nodiscard]] size_t size() const noexcept { return decisions_.size(); }
  /// The first position at which this and `other` recorded a different decision, or -1.
  [[nodiscard]] int first_difference(const DecisionRecorder& other) const;

 private:
  void on_tap(const Tap& tap);

  TapObserver inner_;
  ForcedDecisions decisions_;
  std::map<std::tuple<DecisionKind, int, int>, std::vector<int32_t>> recorded_;
  int step_first_ = 0;     // first position of the current step
  int next_position_ = 0;  // first position of the next step
};

/// The fp32 CPU forward pass of `model` run directly, one step per eval(), so that decisions can be
/// forced. One sequence, positions from 0.
class CpuStepRun {
 public:
  CpuStepRun(const Model& model, const std::string& backend, int n_ctx, int n_threads = 2);
  /// Runs `tokens` as one step and returns the logits of all its rows ([T, n_vocab]). With `forced`,
  /// the decisions it holds for these positions replace the pass's own (and are checked into it);
  /// with `taps`, the step's taps go to it.
  std::vector<float> eval(std::span<const Token> tokens, ForcedDecisions* forced = nullptr,
                          const TapObserver* taps = nullptr);
  [[nodiscard]] int n_tokens() const { return cache_->n_tokens(); }

 private:
  Model model_;
  cpu::ThreadPool pool_;
  TaskRunner runner_;
  std::unique_ptr<AttentionBackend> backend_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<ForwardPass> forward_;
};

}  // namespace latte::detail
