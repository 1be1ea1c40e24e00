// The decode path's expert group size (cuda/moe_experts.hpp, moe_group_tokens) at the batch sizes it was measured
// for on V2-Lite's 64 experts x 6 choices, at DeepSeek-V3's 256 x 8, and its caps. Host-only: no device is touched.
#include <doctest/doctest.h>

#include "cuda/moe_experts.hpp"

namespace {

int group_for(int sequences, int n_experts, int k, bool wide) {
  return latte::cuda::moe_group_tokens(sequences * k, n_experts, sequences, wide);
}

}  // namespace

TEST_CASE("moe_group_tokens: groups of 1, 2 or 8 (16 where wide) by the mean pairs per expert, never 4") {
  // V2-Lite, 64 experts x 6: mean 0.09 / 0.47 -> 1; 0.56 .. 1.59 -> 2; 1.69 and more -> 8; over 8 -> 16 where wide
  CHECK(group_for(1, 64, 6, true) == 1);
  CHECK(group_for(5, 64, 6, true) == 1);
  for (int b : {6, 8, 10, 12, 16, 17}) {
    CAPTURE(b);
    CHECK(group_for(b, 64, 6, true) == 2);
  }
  for (int b : {18, 20, 24, 32, 64, 85}) {
    CAPTURE(b);
    CHECK(group_for(b, 64, 6, true) == 8);
  }
  CHECK(group_for(86, 64, 6, true) == 16);  // 516 pairs: mean 8.06
  CHECK(group_for(128, 64, 6, true) == 16);
  CHECK(group_for(128, 64, 6, false) == 8);
  // DeepSeek-V3, 256 experts x 8: the same means at four times the sequences per expert
  CHECK(group_for(16, 256, 8, false) == 1);  // mean 0.5
  CHECK(group_for(17, 256, 8, false) == 2);
  CHECK(group_for(52, 256, 8, false) == 2);  // mean 1.625
  CHECK(group_for(53, 256, 8, false) == 8);
  CHECK(group_for(128, 256, 8, false) == 8);
  // never more than the step's tokens
  CHECK(latte::cuda::moe_group_tokens(9, 8, 3, true) == 2);
  CHECK(latte::cuda::moe_group_tokens(15, 4, 5, true) == 5);  // mean 3.75: 8, capped at 5 tokens
  CHECK(latte::cuda::moe_group_tokens(0, 64, 0, false) == 1);
}
