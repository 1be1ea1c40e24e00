// MoE routing: from one token's router logits to its chosen experts and their weights, as DeepSeek
// V2/V3 and GLM define it (softmax or sigmoid gating, a selection-only bias, group-limited choice,
// optional renormalisation, a final scale). Ties go to the lower index (expert or group).
//
//   latte::detail::ExpertRouter router(config);
//   router.route(logits_row, bias, choices);  // choices: n_expert_used {expert, weight}
#pragma once

#include "model/forced_decisions.hpp"

#include <latte/model.hpp>

#include <span>
#include <vector>

namespace latte::detail {

/// One chosen expert of a token.
struct ExpertChoice {
  int expert = 0;
  float weight = 0.0f;
};

/// Routing parameters (from a ModelConfig, or built by hand in tests).
struct RouterParams {
  ExpertGating gating = ExpertGating::softmax;
  int n_expert = 0;
  int n_used = 0;
  int n_group = 1;         ///< groups of n_expert / n_group consecutive experts
  int n_group_used = 1;    ///< groups kept before the top-k
  bool normalize = false;  ///< renormalise the chosen weights to sum 1
  float scale = 1.0f;      ///< multiplies the final weights

  static RouterParams from(const ModelConfig& c) {
    return {c.expert_gating,       c.n_expert,
            c.n_expert_used,       c.n_expert_group,
            c.n_expert_group_used, c.expert_weights_norm,
            c.expert_weights_scale};
  }
};

/// Chooses experts. Steps, for one token:
///  1. scores = softmax(logits) or sigmoid(logits)           (over all experts)
///  2. choice = scores + bias (bias: exp_probs_b, selection only; empty = none)
///  3. with n_group > 1: each group's score is the sum of its two largest choice values; the
///     n_group_used best groups are kept, the other groups' experts cannot be chosen
///  4. the n_used largest choice values among the kept experts are chosen
///  5. weight = scores (unbiased) of the chosen; divided by their sum when normalize (the sum
///     clamped below at 2^-14 as llama.cpp does); multiplied by scale
/// Ties at steps 3 and 4: the lower index wins. The choices come out in selection order.
class ExpertRouter {
 public:
  explicit ExpertRouter(RouterParams params);
  [[nodiscard]] const RouterParams& params() const noexcept { return p_; }

  /// Routes one token: `logits` and `bias` (empty or) n_expert values, `out` n_used entries.
  void route(std::span<const float> logits, std::span<const float> bias, std::span<ExpertChoice> out) const;

  /// Routes one token to the forced experts `ids` (n_used distinct ids) instead of its own choice:
  /// weights from this router's scores as in step 5, `out` in the order route() would give them.
  /// Returns how the forced set relates to the own choice. The near-tie check follows steps 3-4:
  /// with groups, every group holding a forced expert must score within 2 margins of the
  /// n_group_used-th best group (a group score is a sum of two values), and the kept groups are
  /// taken to be those groups plus the best other ones; the smallest forced choice value must be
  /// within one margin of the n_used-th best value among the kept groups' experts. The margin is
  /// near_tie_margin of the largest |choice value| of the token. NearTie::deficit is the larger of
  /// the expert deficit and half the group deficit. Throws Error(invalid_argument) naming `where`
  /// for a wrong count, a repeated id or one out of range.
  NearTie route_forced(std::span<const float> logits, std::span<const float> bias, std::span<const int32_t> ids,
                       std::span<ExpertChoice> out, const std::string& where) const;

 private:
  RouterParams p_;
};

}  // namespace latte::detail
