// Test helpers around diagnostics/decision_replay.hpp: the recorder and the CPU step run under the
// test namespace, a prompt-then-decode driver, and per-position errors.
#pragma once

#include "diagnostics/decision_replay.hpp"

#include <latte/token.hpp>

#include <span>
#include <vector>

namespace latte::test {

using detail::CpuStepRun;
using detail::DecisionRecorder;

/// Evaluates `prompt` in one step and then each of `decode` in one step each, returning the logits
/// of every position (prompt rows, then one row per decoded token).
std::vector<float> run_steps(CpuStepRun& run, std::span<const Token> prompt, std::span<const Token> decode,
                             detail::ForcedDecisions* forced = nullptr);

/// Per position (rows of `vocab` logits), ||a - b|| / ||b||.
std::vector<double> position_errors(std::span<const float> a, std::span<const float> b, int vocab);

}  // namespace latte::test
