// Forced decisions: the discrete choices of a forward pass (each MoE router's top-k experts, each
// glm-dsa indexer's top-k positions) taken from outside instead of from the CPU's own scores, so that a
// device pass computing in bf16 can be compared with the fp32 CPU reference exactly even where two
// scores are so close that the two passes choose differently. The CPU pass computes everything else
// itself (expert weights from its own router scores for the forced ids; attention over the forced
// positions) and checks every forced decision against its own scores: a forced choice must be a
// near-tie of its own (see near_tie_margin), otherwise the device pass chose wrong.
//
//   detail::ForcedDecisions forced;
//   forced.force(DecisionKind::experts, /*layer=*/1, /*position=*/7, {3, 5});
//   forward.run({..., .forced = &forced});  // forced.checks(): one per decision used
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace latte::detail {

/// How far apart two passes may see a score and still both be right: `kNearTieUlps` bf16 ulps of
/// the largest score magnitude of the row.
///
/// Derivation. A bf16 value carries 8 significant bits, so one ulp at magnitude m is 2^(e-7) for
/// m in [2^e, 2^(e+1)): between 2^-8 and 2^-7 of m. The device pass rounds activations and matrix
/// operands to bf16 (half an ulp each) and its hidden state differs from the fp32 one by up to the
/// whole-model bf16 bound (diagnostics::kBf16Bound, 2e-2 normalised, i.e. 2.5 to 5 ulps of the row's
/// scale). A score is a linear function of that state (router logits, indexer dot products) followed
/// by monotonic maps with slope <= 1 (sigmoid, softmax, ReLU), so the two passes' values of one
/// score differ by at most a few ulps of the largest score of the row. 8 ulps (3% to 6% of the
/// largest magnitude) covers that with a factor of about 2, and is still far below the spread of
/// the scores of a row, so a choice that is not near the k-th best is rejected.
inline constexpr int kNearTieUlps = 8;

/// One bf16 ulp at magnitude |v| (the smallest normal bf16 ulp for 0 and subnormals).
double bf16_ulp(double v);

/// kNearTieUlps bf16 ulps of `largest_magnitude`.
double near_tie_margin(double largest_magnitude);

/// How a forced top-k choice relates to the choice the CPU's own scores make.
struct NearTie {
  int differing = 0;   ///< forced entries the CPU's own top-k does not contain
  double deficit = 0;  ///< the CPU's k-th best value minus the smallest forced value (<= 0: as good)
  double margin = 0;   ///< near_tie_margin of the row
  [[nodiscard]] bool holds() const noexcept { return deficit <= margin; }
  /// deficit in bf16 ulps of the row's largest magnitude (margin / kNearTieUlps per ulp).
  [[nodiscard]] double deficit_ulps() const noexcept { return margin > 0 ? deficit / (margin / kNearTieUlps) : 0.0; }
};

/// Writes the forced top-k selection `forced` (positions of a row with `scores.size()` causal cache
/// positions; -1 entries are padding) ascending into `out` (top_k slots, -1 padded) and returns how
/// it relates to the top-k of `scores` (select_top_positions). Throws Error(invalid_argument) naming
/// `where` for a position out of range, a repeated one, or a count other than min(top_k, scores.size()).
NearTie force_selection(std::span<const float> scores, int top_k, std::span<const int32_t> forced,
                        std::span<int32_t> out, const std::string& where);

enum class DecisionKind { experts, selection };

/// "experts" or "selection".
const char* decision_kind_name(DecisionKind kind);

/// One forced decision as the CPU pass used and checked it.
struct DecisionCheck {
  DecisionKind kind = DecisionKind::experts;
  int layer = 0;
  int position = 0;  ///< the token's absolute position in its sequence
  NearTie tie{};
};

/// Decisions to force, by kind, block and token position (a pass given them must run batches of a
/// single sequence), and the checks of those a pass used.
class ForcedDecisions {
 public:
  /// Forces the expert ids (experts) or selected cache positions (selection, -1 = padding) of the
  /// token at `position` in block `layer`; replaces an earlier entry.
  void force(DecisionKind kind, int layer, int position, std::vector<int32_t> values);
  /// The forced values, or null when that decision is the pass's own.
  [[nodiscard]] const std::vector<int32_t>* find(DecisionKind kind, int layer, int position) const;
  /// Forced decisions held.
  [[nodiscard]] size_t size() const noexcept { return values_.size(); }

  /// Called by a pass for every forced decision it used.
  void record(const DecisionCheck& check) { checks_.push_back(check); }
  [[nodiscard]] const std::vector<DecisionCheck>& checks() const noexcept { return checks_; }
  void clear_checks() noexcept { checks_.clear(); }

  /// Checked decisions of `kind`, those among them that differ from the CPU's own, and those that
  /// are no near-tie.
  [[nodiscard]] size_t n_checked(DecisionKind kind) const;
  [[nodiscard]] size_t n_flipped(DecisionKind kind) const;
  [[nodiscard]] std::vector<DecisionCheck> failures() const;
  /// "experts: 96 checked, 2 flipped; selection: 144 checked, 5 flipped; largest deficit 1.3 ulps
  /// (margin 8); all near-ties" or "...; 1 NOT near-ties: selection blk.1 pos 40 deficit 31 ulps".
  [[nodiscard]] std::string summary() const;

 private:
  std::map<std::tuple<DecisionKind, int, int>, std::vector<int32_t>> values_;
  std::vector<DecisionCheck> checks_;
};

}  // namespace latte::detail
