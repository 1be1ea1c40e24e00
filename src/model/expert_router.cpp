#include "model/expert_router.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

namespace latte::detail {

namespace {
/// llama.cpp clamps the sum of the chosen weights from below before renormalising.
constexpr float kMinWeightSum = 6.103515625e-5f;  // 2^-14
}  // namespace

ExpertRouter::ExpertRouter(RouterParams params) : p_(params) {
  if (p_.n_expert <= 0 || p_.n_used <= 0 || p_.n_used > p_.n_expert || p_.n_group <= 0 ||
      p_.n_expert % p_.n_group != 0 || p_.n_group_used <= 0 || p_.n_group_used > p_.n_group ||
      p_.n_used > p_.n_group_used * (p_.n_expert / p_.n_group)) {
    throw Error(ErrorCode::invalid_argument, "expert router: inconsistent parameters (experts " +
                                                 std::to_string(p_.n_expert) + ", used " + std::to_string(p_.n_used) +
                                                 ", groups " + std::to_string(p_.n_group) + ", groups used " +
                                                 std::to_string(p_.n_group_used) + ")");
  }
}

namespace {

// Per-thread scratch of one token's routing.
thread_local std::vector<float> t_scores, t_choice, t_group_score;
thread_local std::vector<int> t_order, t_groups;

/// Larger value first; on equal values the lower index first.
auto better(const std::vector<float>& v) {
  return [&v](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
}

/// Steps 1-2 into t_scores and t_choice; with groups, each group's score (step 3) into t_group_score
/// and the groups in order of preference into t_groups.
void selection_values(const RouterParams& p, std::span<const float> logits, std::span<const float> bias) {
  const int n = p.n_expert;
  std::vector<float>& scores = t_scores;
  std::vector<float>& choice = t_choice;
  scores.resize(static_cast<size_t>(n));
  choice.resize(static_cast<size_t>(n));
  if (p.gating == ExpertGating::softmax) {
    const float max_v = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (int e = 0; e < n; ++e) sum += scores[e] = std::exp(logits[e] - max_v);
    for (int e = 0; e < n; ++e) scores[e] = static_cast<float>(scores[e] / sum);
  } else {
    for (int e = 0; e < n; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
  for (int e = 0; e < n; ++e) choice[e] = scores[e] + (bias.empty() ? 0.0f : bias[e]);
  if (p.n_group <= 1) return;
  const int per_group = n / p.n_group;
  t_group_score.assign(static_cast<size_t>(p.n_group), 0.0f);
  for (int g = 0; g < p.n_group; ++g) {
    float top1 = -std::numeric_limits<float>::infinity(), top2 = top1;
    for (int e = g * per_group; e < (g + 1) * per_group; ++e) {
      if (choice[e] > top1) {
        top2 = top1;
        top1 = choice[e];
      } else if (choice[e] > top2) {
        top2 = choice[e];
      }
    }
    t_group_score[g] = per_group >= 2 ? top1 + top2 : top1;
  }
  t_groups.resize(static_cast<size_t>(p.n_group));
  std::iota(t_groups.begin(), t_groups.end(), 0);
  std::sort(t_groups.begin(), t_groups.end(), better(t_group_score));
}

/// Steps 3-4 over `kept` (per group, 1 = its experts may be chosen): the n_used best experts into
/// t_order's first n_used entries, in selection order.
void choose(const RouterParams& p, const std::vector<char>& kept) {
  const int n = p.n_expert;
  thread_local std::vector<float> masked;
  masked = t_choice;
  if (p.n_group > 1) {
    const int per_group = n / p.n_group;
    for (int e = 0; e < n; ++e) {
      if (!kept[e / per_group]) masked[e] = -std::numeric_limits<float>::infinity();
    }
  }
  t_order.resize(static_cast<size_t>(n));
  std::iota(t_order.begin(), t_order.end(), 0);
  std::partial_sort(t_order.begin(), t_order.begin() + p.n_used, t_order.end(), better(masked));
}

/// Step 5 for out[i].expert (in that order).
void weigh(const RouterParams& p, std::span<ExpertChoice> out) {
  float sum = 0.0f;
  for (auto& c : out) {
    c.weight = t_scores[static_cast<size_t>(c.expert)];
    sum += c.weight;
  }
  const float norm = p.normalize ? 1.0f / std::max(sum, kMinWeightSum) : 1.0f;
  for (auto& c : out) c.weight *= norm * p.scale;
}

}  // namespace

void ExpertRouter::route(std::span<const float> logits, std::span<const float> bias,
                         std::span<ExpertChoice> out) const {
  const int n = p_.n_expert;
  if (static_cast<int>(logits.size()) != n || (!bias.empty() && static_cast<int>(bias.size()) != n) ||
      static_cast<int>(out.size()) != p_.n_used) {
    throw Error(ErrorCode::internal, "expert router: wrong span sizes");
  }
  selection_values(p_, logits, bias);
  thread_local std::vector<char> kept;
  kept.assign(static_cast<size_t>(p_.n_group), p_.n_group > 1 ? 0 : 1);
  if (p_.n_group > 1) {
    for (int i = 0; i < p_.n_group_used; ++i) kept[static_cast<size_t>(t_groups[static_cast<size_t>(i)])] = 1;
  }
  choose(p_, kept);
  for (int i = 0; i < p_.n_used; ++i) out[i].expert = t_order[static_cast<size_t>(i)];
  weigh(p_, out);
}

NearTie ExpertRouter::route_forced(std::span<const float> logits, std::span<const float> bias,
                                   std::span<const int32_t> ids, std::span<ExpertChoice> out,
                                   const std::string& where) const {
  const int n = p_.n_expert;
  if (static_cast<int>(logits.size()) != n || (!bias.empty() && static_cast<int>(bias.size()) != n) ||
      static_cast<int>(out.size()) != p_.n_used) {
    throw Error(ErrorCode::internal, "expert router: wrong span sizes");
  }
  if (static_cast<int>(ids.size()) != p_.n_used) {
    throw Error(ErrorCode::invalid_argument, "forced experts at " + where + ": " + std::to_string(ids.size()) +
                                                 " ids, the router uses " + std::to_string(p_.n_used));
  }
  std::vector<int32_t> sorted(ids.begin(), ids.end());
  std::sort(sorted.begin(), sorted.end());
  if (sorted.front() < 0 || sorted.back() >= n) {
    throw Error(ErrorCode::invalid_argument, "forced experts at " + where + ": expert id " +
                                                 std::to_string(sorted.front() < 0 ? sorted.front() : sorted.back()) +
                                                 " is outside [0, " + std::to_string(n) + ")");
  }
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw Error(ErrorCode::invalid_argument, "forced experts at " + where + ": an expert is chosen twice");
  }
  selection_values(p_, logits, bias);
  const std::vector<float>& choice = t_choice;
  float largest = 0.0f;
  for (float v : choice) largest = std::max(largest, std::fabs(v));
  NearTie tie;
  tie.margin = near_tie_margin(largest);

  // The own choice, for the count of differing entries.
  thread_local std::vector<char> kept;
  kept.assign(static_cast<size_t>(p_.n_group), p_.n_group > 1 ? 0 : 1);
  double group_deficit = 0.0;
  if (p_.n_group > 1) {
    for (int i = 0; i < p_.n_group_used; ++i) kept[static_cast<size_t>(t_groups[static_cast<size_t>(i)])] = 1;
    choose(p_, kept);
    const int per_group = n / p_.n_group;
    // Groups of the forced experts, then the best others up to n_group_used.
    thread_local std::vector<char> forced_kept;
    forced_kept.assign(static_cast<size_t>(p_.n_group), 0);
    int n_kept = 0;
    float weakest = std::numeric_limits<float>::infinity();
    for (int32_t e : sorted) {
      const int g = e / per_group;
      if (!forced_kept[static_cast<size_t>(g)]) ++n_kept;
      forced_kept[static_cast<size_t>(g)] = 1;
      weakest = std::min(weakest, t_group_score[static_cast<size_t>(g)]);
    }
    const float last_kept = t_group_score[static_cast<size_t>(t_groups[static_cast<size_t>(p_.n_group_used - 1)])];
    group_deficit = n_kept > p_.n_group_used ? std::numeric_limits<double>::infinity()
                                             : static_cast<double>(last_kept) - static_cast<double>(weakest);
    for (size_t i = 0; i < t_groups.size() && n_kept < p_.n_group_used; ++i) {
      if (!forced_kept[static_cast<size_t>(t_groups[i])]) {
        forced_kept[static_cast<size_t>(t_groups[i])] = 1;
        ++n_kept;
      }
    }
    // Own set under the CPU's groups (for `differing`) ...
    std::vector<int32_t> own(t_order.begin(), t_order.begin() + p_.n_used);
    std::sort(own.begin(), own.end());
    for (int32_t e : sorted) tie.differing += std::binary_search(own.begin(), own.end(), e) ? 0 : 1;
    // ... and the n_used-th best value under the forced experts' groups (for the near-tie).
    kept = forced_kept;
  } else {
    choose(p_, kept);
    std::vector<int32_t> own(t_order.begin(), t_order.begin() + p_.n_used);
    std::sort(own.begin(), own.end());
    for (int32_t e : sorted) tie.differing += std::binary_search(own.begin(), own.end(), e) ? 0 : 1;
  }
  choose(p_, kept);
  const float kth = choice[static_cast<size_t>(t_order[static_cast<size_t>(p_.n_used - 1)])];
  float smallest_forced = std::numeric_limits<float>::infinity();
  for (int32_t e : sorted) smallest_forced = std::min(smallest_forced, choice[static_cast<size_t>(e)]);
  tie.deficit = std::max(static_cast<double>(kth) - static_cast<double>(smallest_forced), group_deficit / 2.0);

  // The forced experts in the order route() would list them (so the weights sum in the same order).
  std::sort(sorted.begin(), sorted.end(), [&](int a, int b) {
    return choice[static_cast<size_t>(a)] > choice[static_cast<size_t>(b)] ||
           (choice[static_cast<size_t>(a)] == choice[static_cast<size_t>(b)] && a < b);
  });
  for (int i = 0; i < p_.n_used; ++i) out[i].expert = sorted[static_cast<size_t>(i)];
  weigh(p_, out);
  return tie;
}

}  // namespace latte::detail
