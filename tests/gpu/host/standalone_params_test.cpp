// The parameter blocks that the GPU self-test and `latte kernel-bench` launch the MoE and attention
// kernels with (cuda/standalone_params.hpp): every stride must address the contiguous layout the
// header documents, element for element, and the random router choices must be k distinct experts.
// Host-only: nothing here touches a device (the pointers are never dereferenced).
#include <doctest/doctest.h>

#include <latte/error.hpp>
#include <latte/quant.hpp>

#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "cuda/standalone_params.hpp"

namespace {

using bf16 = __nv_bfloat16;
using latte::GgmlType;

/// A fake, 16-byte aligned device address (never dereferenced).
template <class T>
T* fake_pointer(uintptr_t n) {
  return reinterpret_cast<T*>(n << 20);
}

/// Element (b, pos, h, d) of a PagedRows without a page table: one page per sequence.
template <class T>
int64_t element(const latte::cuda::PagedRows<T>& rows, int64_t b, int64_t pos, int64_t h, int64_t d) {
  CHECK(rows.page_table == nullptr);
  return b * rows.page_stride + pos * rows.token_stride + h * rows.head_stride + d;
}

int draw(std::mt19937_64& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

}  // namespace

TEST_CASE("standalone attention params address contiguous [batch, capacity, heads, dim] caches") {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 20; ++trial) {
    const int batch = draw(rng, 1, 9), heads = draw(rng, 1, 130), capacity = draw(rng, 1, 5000);
    const int qk = 8 * draw(rng, 1, 40), v = 8 * draw(rng, 1, 40);
    const latte::cuda::AttentionShape shape{.batch = batch,
                                            .n_heads = heads,
                                            .capacity = capacity,
                                            .head_dim_qk = qk,
                                            .head_dim_v = v,
                                            .scale = 0.125f,
                                            .out_type = latte::cuda::AttnOutputType::bf16};
    const int b = draw(rng, 0, batch - 1), pos = draw(rng, 0, capacity - 1), h = draw(rng, 0, heads - 1);
    const int dq = draw(rng, 0, qk - 1), dv = draw(rng, 0, v - 1);
    CAPTURE(batch);
    CAPTURE(heads);
    CAPTURE(capacity);
    CAPTURE(qk);
    CAPTURE(v);

    const auto sd = latte::cuda::standard_decode_params(shape, {.q = fake_pointer<const bf16>(1),
                                                                .k = fake_pointer<const bf16>(2),
                                                                .v = fake_pointer<const bf16>(3),
                                                                .kv_lens = fake_pointer<const int32_t>(4),
                                                                .out = fake_pointer<void>(5)});
    CHECK(b * sd.q_batch_stride + h * sd.q_head_stride + dq == (int64_t{b} * heads + h) * qk + dq);
    CHECK(element(sd.k_cache, b, pos, h, dq) == ((int64_t{b} * capacity + pos) * heads + h) * qk + dq);
    CHECK(element(sd.v_cache, b, pos, h, dv) == ((int64_t{b} * capacity + pos) * heads + h) * v + dv);
    CHECK(sd.q == fake_pointer<const bf16>(1));
    CHECK(sd.k_cache.data == fake_pointer<const bf16>(2));
    CHECK(sd.v_cache.data == fake_pointer<const bf16>(3));
    CHECK(sd.kv_lens == fake_pointer<const int32_t>(4));
    CHECK(sd.out == fake_pointer<void>(5));
    CHECK(sd.indices == nullptr);
    CHECK(sd.lse == nullptr);
    CHECK((sd.batch == batch && sd.n_heads == heads && sd.head_dim_qk == qk && sd.head_dim_v == v));
    CHECK(sd.max_kv_len == capacity);
    CHECK(sd.scale == 0.125f);
    CHECK(sd.out_type == latte::cuda::AttnOutputType::bf16);

    // MLA: separate query buffers (the defaults), then one buffer of 576-element rows.
    constexpr int L = latte::cuda::kMlaLatentDim, R = latte::cuda::kMlaRopeDim, row = latte::cuda::kMlaCacheRow;
    const int d = draw(rng, 0, row - 1), dl = draw(rng, 0, L - 1), dr = draw(rng, 0, R - 1);
    const auto mla = latte::cuda::mla_decode_params(shape, {.q_latent = fake_pointer<const bf16>(6),
                                                            .q_rope = fake_pointer<const bf16>(7),
                                                            .cache = fake_pointer<const bf16>(8),
                                                            .kv_lens = fake_pointer<const int32_t>(9),
                                                            .out = fake_pointer<void>(10)});
    CHECK(element(mla.cache, b, pos, 0, d) == (int64_t{b} * capacity + pos) * row + d);
    CHECK(mla.q_len == 1);
    CHECK(b * mla.q_latent_token_stride + h * mla.q_latent_head_stride + dl == (int64_t{b} * heads + h) * L + dl);
    CHECK(b * mla.q_rope_token_stride + h * mla.q_rope_head_stride + dr == (int64_t{b} * heads + h) * R + dr);
    CHECK((mla.q_latent == fake_pointer<const bf16>(6) && mla.q_rope == fake_pointer<const bf16>(7)));
    CHECK((mla.cache.data == fake_pointer<const bf16>(8) && mla.kv_lens == fake_pointer<const int32_t>(9)));
    CHECK(mla.out == fake_pointer<void>(10));
    CHECK((mla.batch == batch && mla.n_heads == heads && mla.max_kv_len == capacity && mla.scale == 0.125f));
    CHECK(mla.indices == nullptr);
    const bf16* q = fake_pointer<const bf16>(11);
    const auto packed = latte::cuda::mla_decode_params(
        shape, {.q_latent = q, .q_latent_head_stride = row, .q_rope = q + L, .q_rope_head_stride = row});
    CHECK(b * packed.q_latent_token_stride + h * packed.q_latent_head_stride + dl ==
          (int64_t{b} * heads + h) * row + dl);
    CHECK(b * packed.q_rope_token_stride + h * packed.q_rope_head_stride + dr == (int64_t{b} * heads + h) * row + dr);

    // Flash prefill: one sequence; its T queries are the last T of the capacity positions.
    const int T = draw(rng, 1, capacity);
    const int t = draw(rng, 0, T - 1);
    latte::cuda::AttentionShape one = shape;
    one.batch = 1;
    const auto fp = latte::cuda::flash_prefill_params(
        one, T,
        {.q = fake_pointer<const bf16>(12), .k = fake_pointer<const bf16>(13), .v = fake_pointer<const bf16>(14)});
    CHECK(fp.pos0 + T == capacity);
    CHECK(fp.n_queries == T);
    CHECK(fp.cache_batch == 0);
    CHECK(t * fp.q_token_stride + h * fp.q_head_stride + dq == (int64_t{t} * heads + h) * qk + dq);
    CHECK(element(fp.k_cache, 0, pos, h, dq) == (int64_t{pos} * heads + h) * qk + dq);
    CHECK(element(fp.v_cache, 0, pos, h, dv) == (int64_t{pos} * heads + h) * v + dv);
    CHECK(fp.key_mask == nullptr);
  }
}

TEST_CASE("flash_prefill_params rejects a batch, no queries and more queries than positions") {
  const latte::cuda::AttentionShape shape{
      .batch = 2, .n_heads = 16, .capacity = 64, .head_dim_qk = 192, .head_dim_v = 128};
  CHECK_THROWS_AS(latte::cuda::flash_prefill_params(shape, 8, {}), latte::Error);
  latte::cuda::AttentionShape one = shape;
  one.batch = 1;
  CHECK_THROWS_AS(latte::cuda::flash_prefill_params(one, 0, {}), latte::Error);
  CHECK_THROWS_AS(latte::cuda::flash_prefill_params(one, 65, {}), latte::Error);
  CHECK(latte::cuda::flash_prefill_params(one, 64, {}).pos0 == 0);
}

TEST_CASE("moe_expert_weights: stacks of expert matrices back to back (DeepSeek-V2-Lite sizes)") {
  // 64 experts of 1408, hidden 2048: gate/up Q4_K rows of 2048 values are 8 blocks of 144 bytes,
  // down Q5_0 rows of 1408 values are 44 blocks of 22 bytes.
  const latte::cuda::MoeShape m{.n_experts = 64,
                                .k = 6,
                                .hidden = 2048,
                                .ffn = 1408,
                                .gate_type = GgmlType::q4_k,
                                .up_type = GgmlType::q4_k,
                                .down_type = GgmlType::q5_0};
  const auto w = latte::cuda::moe_expert_weights(m, fake_pointer<const void>(1), fake_pointer<const void>(2),
                                                 fake_pointer<const void>(3));
  CHECK(w.gate.matrix_stride_bytes == int64_t{1408} * 8 * 144);
  CHECK(w.up.matrix_stride_bytes == int64_t{1408} * 8 * 144);
  CHECK(w.down.matrix_stride_bytes == int64_t{2048} * 44 * 22);
  CHECK(w.gate.bytes == 64 * w.gate.matrix_stride_bytes);
  CHECK(w.up.bytes == 64 * w.up.matrix_stride_bytes);
  CHECK(w.down.bytes == 64 * w.down.matrix_stride_bytes);
  CHECK((w.gate.type == GgmlType::q4_k && w.up.type == GgmlType::q4_k && w.down.type == GgmlType::q5_0));
  CHECK((w.gate.data == fake_pointer<const void>(1) && w.up.data == fake_pointer<const void>(2) &&
         w.down.data == fake_pointer<const void>(3)));
  CHECK((w.n_experts == 64 && w.hidden == 2048 && w.ffn == 1408));
  CHECK(latte::cuda::expert_matrix_bytes(GgmlType::q8_0, 3, 64) == 3 * 2 * 34);

  const auto ws = latte::cuda::moe_workspace_shape(m, 512);
  CHECK((ws.max_tokens == 512 && ws.k == 6 && ws.n_experts == 64 && ws.hidden == 2048 && ws.ffn == 1408));

  const auto call = latte::cuda::moe_experts_call(
      m, 5,
      {.ids = fake_pointer<const int32_t>(4), .weights = fake_pointer<const float>(5), .out = fake_pointer<float>(6)});
  CHECK((call.n_tokens == 5 && call.k == 6 && call.x_stride == 2048 && call.out_stride == 2048));
  CHECK((call.ids == fake_pointer<const int32_t>(4) && call.weights == fake_pointer<const float>(5)));
  CHECK((call.out == fake_pointer<float>(6) && call.x == nullptr && call.x_bf16 == nullptr));
  CHECK((!call.accumulate && call.held_first == -1));
}

TEST_CASE("moe_router_params carries the layer's routing over contiguous logits") {
  const latte::cuda::MoeShape m{.n_experts = 256,
                                .k = 8,
                                .gating = latte::cuda::MoeGating::sigmoid,
                                .n_groups = 8,
                                .groups_used = 4,
                                .normalize = true,
                                .scale = 2.5f};
  const auto p = latte::cuda::moe_router_params(m, 7, fake_pointer<const float>(1), fake_pointer<const float>(2),
                                                fake_pointer<int32_t>(3), fake_pointer<float>(4));
  CHECK((p.logits_stride == 256 && p.n_experts == 256 && p.n_tokens == 7 && p.k == 8));
  CHECK((p.gating == latte::cuda::MoeGating::sigmoid && p.n_groups == 8 && p.groups_used == 4));
  CHECK((p.normalize && p.scale == 2.5f));
  CHECK((p.logits == fake_pointer<const float>(1) && p.selection_bias == fake_pointer<const float>(2)));
  CHECK((p.ids == fake_pointer<int32_t>(3) && p.weights == fake_pointer<float>(4)));
}

TEST_CASE("random_expert_ids gives each token k distinct experts, every expert about equally often") {
  std::mt19937_64 rng(std::random_device{}());
  const int E = 10, k = 4, tokens = 5000;
  const auto ids = latte::cuda::random_expert_ids({.n_experts = E, .k = k}, tokens, rng);
  REQUIRE(ids.size() == static_cast<size_t>(tokens) * k);
  std::vector<int> count(E, 0), first(E, 0);
  for (int t = 0; t < tokens; ++t) {
    std::set<int32_t> chosen;
    for (int j = 0; j < k; ++j) {
      const int32_t e = ids[static_cast<size_t>(t) * k + j];
      REQUIRE((e >= 0 && e < E));
      chosen.insert(e);
      ++count[static_cast<size_t>(e)];
    }
    CHECK(chosen.size() == static_cast<size_t>(k));
    ++first[static_cast<size_t>(ids[static_cast<size_t>(t) * k])];
  }
  // Expected k/E * tokens = 2000 per expert (sd ~ 35) and tokens/E = 500 first choices (sd ~ 21):
  // 8 standard deviations apart from the bounds.
  for (int e = 0; e < E; ++e) {
    CAPTURE(e);
    CHECK(count[static_cast<size_t>(e)] > 1700);
    CHECK(count[static_cast<size_t>(e)] < 2300);
    CHECK(first[static_cast<size_t>(e)] > 330);
    CHECK(first[static_cast<size_t>(e)] < 670);
  }
  CHECK_THROWS_AS(latte::cuda::random_expert_ids({.n_experts = 4, .k = 5}, 1, rng), latte::Error);
  CHECK_THROWS_AS(latte::cuda::random_expert_ids({.n_experts = 4, .k = 0}, 1, rng), latte::Error);
}
