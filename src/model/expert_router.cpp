#include "model/expert_router.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

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

void ExpertRouter::route(std::span<const float> logits, std::span<const float> bias,
                         std::span<ExpertChoice> out) const {
  const int n = p_.n_expert;
  if (static_cast<int>(logits.size()) != n || (!bias.empty() && static_cast<int>(bias.size()) != n) ||
      static_cast<int>(out.size()) != p_.n_used) {
    throw Error(ErrorCode::internal, "expert router: wrong span sizes");
  }
  thread_local std::vector<float> scores, choice;
  thread_local std::vector<int> order;
  scores.resize(static_cast<size_t>(n));
  choice.resize(static_cast<size_t>(n));

  if (p_.gating == ExpertGating::softmax) {
    const float max_v = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (int e = 0; e < n; ++e) sum += scores[e] = std::exp(logits[e] - max_v);
    for (int e = 0; e < n; ++e) scores[e] = static_cast<float>(scores[e] / sum);
  } else {
    for (int e = 0; e < n; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
  for (int e = 0; e < n; ++e) choice[e] = scores[e] + (bias.empty() ? 0.0f : bias[e]);

  // Larger value first; on equal values the lower index first.
  auto better = [](const std::vector<float>& v) {
    return [&v](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
  };

  if (p_.n_group > 1) {
    const int per_group = n / p_.n_group;
    thread_local std::vector<float> group_score;
    thread_local std::vector<int> groups;
    group_score.assign(static_cast<size_t>(p_.n_group), 0.0f);
    for (int g = 0; g < p_.n_group; ++g) {
      float top1 = -std::numeric_limits<float>::infinity(), top2 = top1;
      for (int e = g * per_group; e < (g + 1) * per_group; ++e) {
        if (choice[e] > top1) {
          top2 = top1;
          top1 = choice[e];
        } else if (choice[e] > top2) {
          top2 = choice[e];
        }
      }
      group_score[g] = per_group >= 2 ? top1 + top2 : top1;
    }
    groups.resize(static_cast<size_t>(p_.n_group));
    std::iota(groups.begin(), groups.end(), 0);
    std::partial_sort(groups.begin(), groups.begin() + p_.n_group_used, groups.end(), better(group_score));
    thread_local std::vector<char> kept;
    kept.assign(static_cast<size_t>(p_.n_group), 0);
    for (int i = 0; i < p_.n_group_used; ++i) kept[groups[i]] = 1;
    for (int e = 0; e < n; ++e) {
      if (!kept[e / per_group]) choice[e] = -std::numeric_limits<float>::infinity();
    }
  }

  order.resize(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + p_.n_used, order.end(), better(choice));

  float sum = 0.0f;
  for (int i = 0; i < p_.n_used; ++i) {
    out[i] = {order[i], scores[order[i]]};
    sum += out[i].weight;
  }
  const float norm = p_.normalize ? 1.0f / std::max(sum, kMinWeightSum) : 1.0f;
  for (auto& c : out) c.weight *= norm * p_.scale;
}

}  // namespace latte::detail
