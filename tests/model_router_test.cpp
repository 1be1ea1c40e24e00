// MoE routing on hand-built router logits with known expected choices.
#include "model/expert_router.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

using latte::ExpertGating;
using latte::detail::ExpertChoice;
using latte::detail::ExpertRouter;
using latte::detail::RouterParams;

namespace {

std::vector<ExpertChoice> route(const RouterParams& p, const std::vector<float>& logits,
                                const std::vector<float>& bias = {}) {
  std::vector<ExpertChoice> out(static_cast<size_t>(p.n_used));
  ExpertRouter(p).route(logits, bias, out);
  return out;
}

std::vector<int> experts(const std::vector<ExpertChoice>& c) {
  std::vector<int> e;
  for (const auto& x : c) e.push_back(x.expert);
  return e;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

TEST_CASE("softmax routing picks the largest logits, ties to the lower expert index") {
  const RouterParams p{.gating = ExpertGating::softmax, .n_expert = 6, .n_used = 2};
  const std::vector<float> logits{0.5f, 2.0f, 1.0f, 2.0f, 2.0f, -1.0f};
  const auto c = route(p, logits);
  CHECK(experts(c) == std::vector<int>{1, 3});  // 1, 3 and 4 tie: the lower indices win
  double z = 0;
  for (float l : logits) z += std::exp(l);
  CHECK(c[0].weight == doctest::Approx(std::exp(2.0) / z));  // softmax over all experts, not renormalised
  CHECK(c[1].weight == doctest::Approx(std::exp(2.0) / z));
}

TEST_CASE("the selection bias changes which experts are chosen but not their weights") {
  const RouterParams p{.gating = ExpertGating::sigmoid, .n_expert = 4, .n_used = 2, .normalize = false, .scale = 2.5f};
  const std::vector<float> logits{1.0f, 0.0f, 0.5f, -0.5f};
  const std::vector<float> bias{0.0f, 0.0f, -1.0f, 1.0f};  // choice: 0.73, 0.5, -0.38, 1.38
  const auto c = route(p, logits, bias);
  CHECK(experts(c) == std::vector<int>{3, 0});
  CHECK(c[0].weight == doctest::Approx(2.5 * sigmoid(-0.5)));  // unbiased score, scaled
  CHECK(c[1].weight == doctest::Approx(2.5 * sigmoid(1.0)));
}

TEST_CASE("renormalised weights sum to the scale") {
  const RouterParams p{.gating = ExpertGating::sigmoid, .n_expert = 8, .n_used = 3, .normalize = true, .scale = 1.8f};
  const auto c = route(p, {0.1f, 0.9f, -0.3f, 0.4f, 1.2f, 0.0f, -2.0f, 0.3f});
  CHECK(experts(c) == std::vector<int>{4, 1, 3});
  const double s4 = sigmoid(1.2), s1 = sigmoid(0.9), s3 = sigmoid(0.4);
  CHECK(c[0].weight == doctest::Approx(1.8 * s4 / (s4 + s1 + s3)));
  CHECK(c[0].weight + c[1].weight + c[2].weight == doctest::Approx(1.8));
}

TEST_CASE("group-limited routing keeps the groups with the best top-2 sums") {
  // 8 experts in 4 groups of 2, keep 2 groups, choose 2 experts.
  //   group 0: experts 0,1 logits 3.0, -3.0   (best single expert, poor pair)
  //   group 1: experts 2,3 logits 1.0,  1.0
  //   group 2: experts 4,5 logits 0.5,  0.8
  //   group 3: experts 6,7 logits 1.5, -0.5
  const RouterParams p{.gating = ExpertGating::sigmoid, .n_expert = 8, .n_used = 2, .n_group = 4, .n_group_used = 2};
  const std::vector<float> logits{3.0f, -3.0f, 1.0f, 1.0f, 0.5f, 0.8f, 1.5f, -0.5f};
  // Group sums of sigmoids: g0 0.953+0.047=1.0, g1 1.462, g2 1.312, g3 1.193 -> keep groups 1 and 2.
  const auto c = route(p, logits);
  CHECK(experts(c) == std::vector<int>{2, 3});  // expert 0 (the best) is in a dropped group

  // Groups tie: the lower group index is kept.
  const auto tied =
      route({.gating = ExpertGating::sigmoid, .n_expert = 4, .n_used = 1, .n_group = 2, .n_group_used = 1},
            {0.0f, 1.0f, 1.0f, 0.0f});
  CHECK(experts(tied) == std::vector<int>{1});
}

TEST_CASE("experts of dropped groups are never chosen, even when kept experts score below zero") {
  // Biased choice values of the kept group are negative; the dropped group's must not win over them.
  const RouterParams p{.gating = ExpertGating::sigmoid, .n_expert = 4, .n_used = 2, .n_group = 2, .n_group_used = 1};
  const std::vector<float> logits{-4.0f, -4.0f, -6.0f, -6.0f};
  const std::vector<float> bias{-0.5f, -0.5f, -0.9f, -0.9f};
  const auto c = route(p, logits, bias);
  CHECK(experts(c) == std::vector<int>{0, 1});
}
