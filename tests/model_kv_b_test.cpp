// The fused attn_kv_b layout is a per-head interleave of W_UK and W_UV; split/merge convert exactly.
#include "model/kv_b.hpp"

#include <latte/error.hpp>

#include <doctest/doctest.h>

#include <random>
#include <vector>

TEST_CASE("kv_b split is a per-head interleave: a hand-built case") {
  // N = 2 heads, L = 2, P = 2, V = 1. Fused rows per head: W_UK rows k0, k1 (L values each), then v0.
  //   head 0: k0 = [1 2], k1 = [3 4], v0 = [5 6];  head 1: k0 = [7 8], k1 = [9 10], v0 = [11 12]
  const std::vector<float> fused{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const latte::KvBDims d{.n_head = 2, .kv_lora_rank = 2, .qk_nope_head_dim = 2, .v_head_dim = 1};
  std::vector<float> k_b(8), v_b(4);
  latte::split_kv_b(fused, d, k_b, v_b);
  // k_b {P, L, N}: per head, L rows of P values = W_UK_h transposed.
  CHECK(k_b == std::vector<float>{1, 3, 2, 4, 7, 9, 8, 10});
  // v_b {L, V, N}: per head, V rows of L values.
  CHECK(v_b == std::vector<float>{5, 6, 11, 12});
}

TEST_CASE("kv_b split and merge round-trip exactly") {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> dim(2, 7);  // >= 2: a transpose is visible
  const latte::KvBDims d{
      .n_head = dim(rng), .kv_lora_rank = dim(rng), .qk_nope_head_dim = dim(rng), .v_head_dim = dim(rng)};
  CAPTURE(d.n_head);
  CAPTURE(d.kv_lora_rank);
  CAPTURE(d.qk_nope_head_dim);
  CAPTURE(d.v_head_dim);
  const size_t n = static_cast<size_t>(d.n_head), l = static_cast<size_t>(d.kv_lora_rank);
  const size_t p = static_cast<size_t>(d.qk_nope_head_dim), v = static_cast<size_t>(d.v_head_dim);
  std::normal_distribution<float> value;
  std::vector<float> fused(n * (p + v) * l);
  for (auto& x : fused) x = value(rng);
  std::vector<float> k_b(n * l * p), v_b(n * v * l), back(fused.size());
  latte::split_kv_b(fused, d, k_b, v_b);
  latte::merge_kv_b(k_b, v_b, d, back);
  CHECK(back == fused);
  // And the element mapping: fused[h][i][j] (row i < P of head h, column j) is k_b[h][j][i].
  size_t mismatches = 0;
  for (size_t h = 0; h < n; ++h) {
    for (size_t i = 0; i < p; ++i) {
      for (size_t j = 0; j < l; ++j) mismatches += k_b[(h * l + j) * p + i] != fused[(h * (p + v) + i) * l + j];
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("kv_b conversions reject sizes that do not match the dimensions") {
  const latte::KvBDims d{.n_head = 2, .kv_lora_rank = 2, .qk_nope_head_dim = 2, .v_head_dim = 1};
  std::vector<float> fused(12), k_b(8), v_b(3);
  CHECK_THROWS_AS(latte::split_kv_b(fused, d, k_b, v_b), latte::Error);
  CHECK_THROWS_AS(latte::merge_kv_b(k_b, v_b, d, fused), latte::Error);
}
