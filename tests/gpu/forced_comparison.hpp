// CUDA against the CPU reference with the CUDA pass's discrete decisions replayed on the CPU
// (tests/support/decision_replay.hpp): a CUDA run records its expert_ids and index_selection taps for
// every layer and step, the fp32 CPU pass runs the same tokens with those decisions forced, and then
// every position must agree within the bf16 bound. A forced decision must be a near-tie of the CPU's
// own scores (model/forced_decisions.hpp); one that is not is a CUDA error and fails the comparison.
//
//   auto run = latte::test::gpu::run_recording(gpu_model, "mla", prompt, decode);
//   auto reference = latte::test::gpu::forced_reference(cpu_model, prompt, decode, run);
//   CHECK(latte::test::gpu::check_forced(run, reference, "test-v3 mla", vocab, 2e-2));
#pragma once

#include "support/decision_replay.hpp"

#include <latte/model.hpp>
#include <latte/token.hpp>

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace latte::test::gpu {

/// A run's logits (every prompt position, then one row per decoded token) and its decisions.
struct RecordedRun {
  std::vector<float> logits;
  std::unique_ptr<DecisionRecorder> decisions;
};

/// Runs `prompt` in one Session::eval (logits_all) and each of `decode` in one eval each on `model`
/// with attention `backend`, recording the decisions; `inner` receives every tap too.
RecordedRun run_recording(const Model& model, const std::string& backend, std::span<const Token> prompt,
                          std::span<const Token> decode, TapObserver inner = {});

/// The CPU reference of the same steps on `cpu_model` (the same file loaded on the CPU) with the
/// decisions of `run` forced; its decision checks accumulate in run.decisions->decisions().
std::vector<float> forced_reference(const Model& cpu_model, std::span<const Token> prompt,
                                    std::span<const Token> decode, RecordedRun& run);

/// The smallest position at which a forced decision differs from the CPU's own, or -1.
int first_flip(const detail::ForcedDecisions& forced);

/// MoE blocks times positions, plus (glm-dsa) blocks times positions with more than top_k keys:
/// the decisions a run over `n_positions` tokens from an empty cache takes.
size_t expected_checks(const ModelConfig& config, int n_positions, detail::DecisionKind kind);

/// Checks (doctest CHECK) and prints, under `label`: every position of `logits` within `tol` of
/// `reference` (per position ||a - b|| / ||b||), every forced decision checked a near-tie, and every
/// decision of the `n_positions` tokens checked. Returns whether all held.
bool check_forced(const RecordedRun& run, std::span<const float> reference, const std::string& label,
                  const ModelConfig& config, int n_positions, double tol);

}  // namespace latte::test::gpu
