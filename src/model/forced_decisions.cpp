#include "model/forced_decisions.hpp"

#include "model/glm_dsa.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

namespace latte::detail {

double bf16_ulp(double v) {
  constexpr int kMinNormalExponent = -126;  // bf16 has fp32's exponent range
  const double m = std::fabs(v);
  int e = 0;
  (void)std::frexp(m, &e);  // m = f * 2^e, f in [0.5, 1): m in [2^(e-1), 2^e)
  const int exponent = m > 0 && std::isfinite(m) ? std::max(e - 1, kMinNormalExponent) : kMinNormalExponent;
  return std::ldexp(1.0, exponent - 7);  // 7 explicit significand bits
}

double near_tie_margin(double largest_magnitude) { return kNearTieUlps * bf16_ulp(largest_magnitude); }

NearTie force_selection(std::span<const float> scores, int top_k, std::span<const int32_t> forced,
                        std::span<int32_t> out, const std::string& where) {
  const int n = static_cast<int>(scores.size());
  const int k = std::min(top_k, n);
  std::vector<int32_t> chosen;
  for (int32_t p : forced) {
    if (p == -1) continue;
    if (p < 0 || p >= n) {
      throw Error(ErrorCode::invalid_argument, "forced selection at " + where + ": position " + std::to_string(p) +
                                                   " is outside the row's " + std::to_string(n) + " causal positions");
    }
    chosen.push_back(p);
  }
  std::sort(chosen.begin(), chosen.end());
  if (std::adjacent_find(chosen.begin(), chosen.end()) != chosen.end()) {
    throw Error(ErrorCode::invalid_argument, "forced selection at " + where + ": a position is selected twice");
  }
  if (static_cast<int>(chosen.size()) != k || static_cast<int>(out.size()) != top_k) {
    throw Error(ErrorCode::invalid_argument, "forced selection at " + where + ": " + std::to_string(chosen.size()) +
                                                 " positions, the row selects " + std::to_string(k));
  }

  // The CPU's own choice, for the count of differing entries.
  select_top_positions(scores, top_k, out);
  NearTie tie;
  for (int32_t p : chosen) tie.differing += std::binary_search(out.begin(), out.begin() + k, p) ? 0 : 1;

  // The k-th best score against the smallest forced one.
  float largest = 0.0f, kth = std::numeric_limits<float>::infinity(), smallest_forced = kth;
  for (int i = 0; i < k; ++i) kth = std::min(kth, scores[static_cast<size_t>(out[static_cast<size_t>(i)])]);
  for (float s : scores) largest = std::max(largest, std::fabs(s));
  for (int32_t p : chosen) smallest_forced = std::min(smallest_forced, scores[static_cast<size_t>(p)]);
  tie.margin = near_tie_margin(largest);
  tie.deficit = k == 0 ? 0.0 : static_cast<double>(kth) - static_cast<double>(smallest_forced);

  std::fill(out.begin(), out.end(), -1);
  std::copy(chosen.begin(), chosen.end(), out.begin());
  return tie;
}

const char* decision_kind_name(DecisionKind kind) { return kind == DecisionKind::experts ? "experts" : "selection"; }

void ForcedDecisions::force(DecisionKind kind, int layer, int position, std::vector<int32_t> values) {
  values_[{kind, layer, position}] = std::move(values);
}

const std::vector<int32_t>* ForcedDecisions::find(DecisionKind kind, int layer, int position) const {
  const auto it = values_.find({kind, layer, position});
  return it == values_.end() ? nullptr : &it->second;
}

size_t ForcedDecisions::n_checked(DecisionKind kind) const {
  return static_cast<size_t>(
      std::count_if(checks_.begin(), checks_.end(), [&](const DecisionCheck& c) { return c.kind == kind; }));
}

size_t ForcedDecisions::n_flipped(DecisionKind kind) const {
  return static_cast<size_t>(std::count_if(
      checks_.begin(), checks_.end(), [&](const DecisionCheck& c) { return c.kind == kind && c.tie.differing > 0; }));
}

std::vector<DecisionCheck> ForcedDecisions::failures() const {
  std::vector<DecisionCheck> out;
  std::copy_if(checks_.begin(), checks_.end(), std::back_inserter(out),
               [](const DecisionCheck& c) { return !c.tie.holds(); });
  return out;
}

std::string ForcedDecisions::summary() const {
  std::string s;
  for (DecisionKind kind : {DecisionKind::experts, DecisionKind::selection}) {
    if (n_checked(kind) == 0) continue;
    if (!s.empty()) s += "; ";
    s += std::string(decision_kind_name(kind)) + ": " + std::to_string(n_checked(kind)) + " checked, " +
         std::to_string(n_flipped(kind)) + " flipped";
  }
  if (s.empty()) return "no forced decisions used";
  double worst = -std::numeric_limits<double>::infinity();
  for (const DecisionCheck& c : checks_) {
    if (c.tie.differing > 0) worst = std::max(worst, c.tie.deficit_ulps());
  }
  char buf[96];
  if (std::isfinite(worst)) {
    std::snprintf(buf, sizeof buf, "; largest deficit of a flip %.2f ulps (margin %d)", worst, kNearTieUlps);
    s += buf;
  }
  const std::vector<DecisionCheck> bad = failures();
  if (bad.empty()) return s + "; all near-ties";
  s += "; " + std::to_string(bad.size()) + " NOT near-ties";
  for (size_t i = 0; i < bad.size() && i < 4; ++i) {
    std::snprintf(buf, sizeof buf, "%s %s blk.%d pos %d deficit %.1f ulps", i == 0 ? ":" : ",",
                  decision_kind_name(bad[i].kind), bad[i].layer, bad[i].position, bad[i].tie.deficit_ulps());
    s += buf;
  }
  return s;
}

}  // namespace latte::detail
