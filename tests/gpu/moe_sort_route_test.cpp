// moe_sort routing its tokens itself (MoeSortParams::route, the decode path's one launch for both) against moe_route
// then moe_sort: the same choices and weights bit for bit, the same slots and GEMV groups. Also built into the CPU
// emulation (tests/emulation).
#include <doctest/doctest.h>
#include <latte/error.hpp>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "cuda/moe_dispatch.hpp"
#include "cuda/moe_router.hpp"
#include "gpu/attention_test_support.hpp"

namespace {

using namespace latte::test::attention;
using latte::Error;
using latte::cuda::MoeGating;

struct RouterCase {
  int n_experts, k, n_groups, groups_used;
  MoeGating gating;
  bool bias, normalize;
  float scale;
};

}  // namespace

TEST_CASE("moe_sort routing the tokens itself: moe_route's choices bit for bit, and the same slots and groups") {
  Rng rng;
  CAPTURE(rng.seed);
  // V2-Lite at 37 tokens (222 pairs), DeepSeek-V3's group-limited sigmoid at 32 (256 pairs: the most it routes)
  const std::vector<std::pair<RouterCase, int>> cases = {
      {{64, 6, 1, 1, MoeGating::softmax, false, false, 1.0f}, 37},
      {{256, 8, 8, 4, MoeGating::sigmoid, true, true, 2.5f}, 32},
      {{64, 6, 1, 1, MoeGating::softmax, false, false, 1.0f}, 2},
  };
  for (const auto& [rc, tokens] : cases) {
    CAPTURE(rc.n_experts);
    CAPTURE(tokens);
    const int P = tokens * rc.k, E = rc.n_experts, G = 2;
    std::vector<float> logits(static_cast<size_t>(tokens * E));
    for (float& v : logits) v = rng.uniform(-2.0f, 2.0f);
    std::vector<float> bias;
    for (int e = 0; e < E && rc.bias; ++e) bias.push_back(0.1f * static_cast<float>((e * 7) % 5));
    const auto dl = upload(logits);
    const auto db = upload(bias.empty() ? std::vector<float>(1) : bias);
    struct Run {
      latte::cuda::DeviceBuffer<int32_t> ids, offsets, slot_of_pair, token_of_slot, n_groups;
      latte::cuda::DeviceBuffer<float> weights;
      latte::cuda::DeviceBuffer<latte::cuda::GemvGroup> groups;
    };
    auto run = [&](bool in_sort) {
      Run r{latte::cuda::DeviceBuffer<int32_t>(P),
            latte::cuda::DeviceBuffer<int32_t>(E + 1),
            latte::cuda::DeviceBuffer<int32_t>(P),
            latte::cuda::DeviceBuffer<int32_t>(P),
            latte::cuda::DeviceBuffer<int32_t>(1),
            latte::cuda::DeviceBuffer<float>(P),
            latte::cuda::DeviceBuffer<latte::cuda::GemvGroup>(latte::cuda::moe_max_groups(P, E, G))};
      poison(r.ids.data(), r.ids.bytes());
      poison(r.weights.data(), r.weights.bytes());
      const latte::cuda::MoeRouterParams route{.logits = dl.data(),
                                               .logits_stride = E,
                                               .n_tokens = tokens,
                                               .n_experts = E,
                                               .selection_bias = rc.bias ? db.data() : nullptr,
                                               .gating = rc.gating,
                                               .k = rc.k,
                                               .n_groups = rc.n_groups,
                                               .groups_used = rc.groups_used,
                                               .normalize = rc.normalize,
                                               .scale = rc.scale,
                                               .ids = r.ids.data(),
                                               .weights = r.weights.data()};
      if (!in_sort) latte::cuda::moe_route(route, nullptr);
      latte::cuda::moe_sort({.ids = r.ids.data(),
                             .n_tokens = tokens,
                             .k = rc.k,
                             .n_experts = E,
                             .expert_offsets = r.offsets.data(),
                             .slot_of_pair = r.slot_of_pair.data(),
                             .token_of_slot = r.token_of_slot.data(),
                             .groups = r.groups.data(),
                             .group_tokens = G,
                             .n_groups = r.n_groups.data(),
                             .route = in_sort ? route : latte::cuda::MoeRouterParams{}},
                            nullptr);
      return r;
    };
    const Run a = run(false), b = run(true);
    CHECK(download(a.ids.data(), P) == download(b.ids.data(), P));
    const auto wa = download(a.weights.data(), P), wb = download(b.weights.data(), P);
    CHECK(std::memcmp(wa.data(), wb.data(), wa.size() * sizeof(float)) == 0);
    CHECK(download(a.offsets.data(), E + 1) == download(b.offsets.data(), E + 1));
    CHECK(download(a.slot_of_pair.data(), P) == download(b.slot_of_pair.data(), P));
    CHECK(download(a.token_of_slot.data(), P) == download(b.token_of_slot.data(), P));
    const int n = download(a.n_groups.data(), 1)[0];
    REQUIRE(n == download(b.n_groups.data(), 1)[0]);
    const auto ga = download(a.groups.data(), static_cast<size_t>(n)),
               gb = download(b.groups.data(), static_cast<size_t>(n));
    int differ = 0;
    for (int i = 0; i < n; ++i) {
      differ += ga[i].matrix != gb[i].matrix || ga[i].count != gb[i].count;
      for (int t = 0; t < ga[i].count && t < G; ++t) {
        differ += ga[i].x_row[t] != gb[i].x_row[t] || ga[i].y_row[t] != gb[i].y_row[t];
      }
    }
    CHECK_MESSAGE(differ == 0, differ << " of " << n << " groups differ");
  }
  // more pairs than the sort routes, or a route writing elsewhere: latte::Error
  latte::cuda::DeviceBuffer<int32_t> buf(4096);
  latte::cuda::DeviceBuffer<float> fbuf(4096);
  latte::cuda::MoeSortParams bad{.ids = buf.data(),
                                 .n_tokens = 43,
                                 .k = 6,
                                 .n_experts = 64,
                                 .expert_offsets = buf.data(),
                                 .slot_of_pair = buf.data(),
                                 .token_of_slot = buf.data(),
                                 .route = {.logits = fbuf.data(),
                                           .logits_stride = 64,
                                           .n_tokens = 43,
                                           .n_experts = 64,
                                           .k = 6,
                                           .ids = buf.data(),
                                           .weights = fbuf.data()}};
  CHECK_THROWS_AS(latte::cuda::moe_sort(bad, nullptr), Error);  // 258 pairs
  bad.n_tokens = bad.route.n_tokens = 4;
  bad.route.ids = buf.data() + 64;
  CHECK_THROWS_AS(latte::cuda::moe_sort(bad, nullptr), Error);
}
