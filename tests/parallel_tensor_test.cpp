// Tensor parallelism on the CPU: the in-process communicator, the sharding plan (splits, block
// boundaries, errors before loading), and TP models giving the unsharded model's logits.
#include "model/model_state.hpp"
#include "model/presets.hpp"
#include "model/random_model.hpp"
#include "parallel/in_process_communicator.hpp"
#include "parallel/shard_plan.hpp"
#include "parallel/tensor_parallel_forward.hpp"
#include "parallel/tensor_parallel_model.hpp"
#include "support/random_models.hpp"
#include "support/test_options.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/quant.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>

namespace {

using latte::detail::CollectiveType;
using latte::detail::InProcessGroup;

constexpr double kFp32Tolerance = 1e-5;

uint64_t fresh_seed() {
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^ 0x9e3779b97f4a7c15ULL;
}

/// Runs body(rank) on one thread per rank.
void on_ranks(int world, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

std::vector<std::byte> model_bytes(const latte::ModelConfig& config, const latte::RandomModelOptions& options = {}) {
  return latte::random_model_bytes(config, options);
}

latte::Model load(std::span<const std::byte> bytes, latte::ModelParams params = {}) {
  return latte::Model::from_file(latte::gguf::File::from_bytes(bytes, "tp-test.gguf"), std::move(params));
}

latte::Error error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const latte::Error& e) {
    return e;
  }
  FAIL("no latte::Error thrown");
  return latte::Error(latte::ErrorCode::internal, "");
}

}  // namespace

TEST_CASE("the in-process all-reduce gives every rank the rank-ordered sum, fp32 and bf16") {
  for (int world : {1, 2, 3, 4}) {
    const uint64_t seed = fresh_seed();
    INFO("world " << world << " seed " << seed);
    const size_t n = 1000 + static_cast<size_t>(seed % 100);
    std::vector<std::vector<float>> data(static_cast<size_t>(world));
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist;
    for (auto& d : data) {
      d.resize(n);
      for (float& v : d) v = dist(rng);
    }
    std::vector<float> expected(n, 0.0f);
    for (const auto& d : data) {
      for (size_t i = 0; i < n; ++i) expected[i] += d[i];
    }
    std::vector<std::vector<uint16_t>> halves(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      for (float v : data[static_cast<size_t>(r)]) halves[static_cast<size_t>(r)].push_back(latte::fp32_to_bf16(v));
    }
    InProcessGroup group(world);
    on_ranks(world, [&](int r) {
      group.rank(r).all_reduce_sum(std::span<float>(data[static_cast<size_t>(r)]));
      group.rank(r).all_reduce_sum(std::span<uint16_t>(halves[static_cast<size_t>(r)]));
    });
    for (int r = 0; r < world; ++r) {
      CHECK(data[static_cast<size_t>(r)] == expected);  // same bits as the rank-ordered sum
      for (size_t i = 0; i < n; ++i) {
        // bf16 inputs and output: 8 significant bits, so within ~2^-8 of the magnitudes summed.
        const float got = latte::bf16_to_fp32(halves[static_cast<size_t>(r)][i]);
        REQUIRE(std::abs(got - expected[i]) <= 0.01f * (std::abs(expected[i]) + static_cast<float>(world)));
      }
      CHECK(halves[static_cast<size_t>(r)] == halves[0]);
    }
  }
}

TEST_CASE("all_gather concatenates in rank order and broadcast copies the root's buffer") {
  const int world = 4;
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<std::vector<float>> send(world, std::vector<float>(37)), recv(world, std::vector<float>(37 * world, NAN));
  std::vector<std::vector<float>> bcast(world, std::vector<float>(53));
  for (int r = 0; r < world; ++r) {
    for (float& v : send[static_cast<size_t>(r)]) v = dist(rng);
    for (float& v : bcast[static_cast<size_t>(r)]) v = dist(rng);
  }
  const std::vector<float> root_data = bcast[2];
  InProcessGroup group(world);
  on_ranks(world, [&](int r) {
    group.rank(r).all_gather(std::span<const float>(send[static_cast<size_t>(r)]),
                             std::span<float>(recv[static_cast<size_t>(r)]));
    group.rank(r).broadcast(std::span<float>(bcast[static_cast<size_t>(r)]), 2);
  });
  for (int r = 0; r < world; ++r) {
    for (int s = 0; s < world; ++s) {
      CHECK(std::memcmp(recv[static_cast<size_t>(r)].data() + 37 * s, send[static_cast<size_t>(s)].data(),
                        37 * sizeof(float)) == 0);
    }
    CHECK(bcast[static_cast<size_t>(r)] == root_data);
  }
}

TEST_CASE("a failing rank aborts the group instead of leaving the others waiting") {
  InProcessGroup group(3);
  std::vector<int> codes(3, -1);
  on_ranks(3, [&](int r) {
    std::vector<float> v(8, 1.0f);
    try {
      if (r == 1) throw latte::Error(latte::ErrorCode::internal, "rank 1 broke");
      group.rank(r).all_reduce_sum(std::span<float>(v));
      group.rank(r).all_reduce_sum(std::span<float>(v));
    } catch (const latte::Error& e) {
      codes[static_cast<size_t>(r)] = static_cast<int>(e.code());
      if (r == 1) group.abort(e.what());
    }
  });
  CHECK(codes[0] == static_cast<int>(latte::ErrorCode::device));
  CHECK(codes[2] == static_cast<int>(latte::ErrorCode::device));
  group.reset();
  std::vector<std::vector<float>> v(3, std::vector<float>(4, 2.0f));
  on_ranks(3, [&](int r) { group.rank(r).all_reduce_sum(std::span<float>(v[static_cast<size_t>(r)])); });
  CHECK(v[1] == std::vector<float>(4, 6.0f));
}

TEST_CASE("the plan splits attention by heads, FFNs by width and experts whole, from the tensor table") {
  const latte::ModelConfig c = latte::model_preset("test-v3");
  const auto bytes = model_bytes(c);
  const auto file = latte::gguf::File::from_bytes(bytes);
  const auto plan = latte::detail::plan_tensor_parallel(file, c, {.world_size = 2});
  CHECK(plan.heads_per_rank == 2);
  CHECK(plan.experts_per_rank == 8);
  const auto* q_b = plan.find("blk.0.attn_q_b.weight");
  REQUIRE(q_b);
  CHECK(q_b->kind == latte::detail::ShardKind::rows);
  CHECK(q_b->ranges[1] == latte::detail::ShardRange{2 * c.qk_head_dim(), 2 * c.qk_head_dim()});
  const auto* o = plan.find("blk.1.attn_output.weight");
  REQUIRE(o);
  CHECK(o->kind == latte::detail::ShardKind::columns);
  CHECK(o->ranges[1] == latte::detail::ShardRange{2 * c.v_head_dim, 2 * c.v_head_dim});
  CHECK(plan.find("blk.0.attn_q_a.weight")->kind == latte::detail::ShardKind::replicated);
  CHECK(plan.find("blk.0.attn_kv_a_mqa.weight")->kind == latte::detail::ShardKind::replicated);
  CHECK(plan.find("blk.0.ffn_down.weight")->kind == latte::detail::ShardKind::columns);
  CHECK(plan.find("blk.1.ffn_gate_exps.weight")->ranges[1] ==
        latte::detail::ShardRange{8 * c.n_ff_expert, 8 * c.n_ff_expert});
  CHECK(plan.find("blk.1.ffn_down_shexp.weight")->kind == latte::detail::ShardKind::columns);
  CHECK(plan.find("blk.3.attn_q_b.weight") == nullptr);  // the MTP block is not loaded
  // Per-rank bytes: replicated tensors count fully on every rank, split ones once over all ranks.
  uint64_t replicated = 0, split = 0;
  for (const auto& t : plan.tensors) {
    (t.kind == latte::detail::ShardKind::replicated ? replicated : split) += t.rank_bytes[0];
  }
  CHECK(plan.rank_bytes[0] == replicated + split);
  CHECK(2 * split + replicated == plan.total_bytes);
  const std::string text = plan.describe();
  CHECK(text.find("rank 1:") != std::string::npos);
  CHECK(text.find("blk.0.attn_q_b.weight") != std::string::npos);
}

TEST_CASE("a degree the model cannot honour fails before loading, naming the tensor and why") {
  latte::ModelConfig c = latte::model_preset("test-v3");
  const auto bytes = model_bytes(c);
  SUBCASE("heads not divisible") {
    const latte::Error e = error_of([&] { (void)load(bytes, {.tensor_parallel = 3}); });
    CHECK(e.code() == latte::ErrorCode::unsupported);
    CHECK(std::string(e.what()).find("4 attention heads") != std::string::npos);
  }
  SUBCASE("a column split inside a q4_K block") {
    // attn_output has ne[0] = N V = 512 values: 2 ranks hold 256 each (one block), 4 ranks 128.
    const auto q4 = model_bytes(c, {.tensor_type = [](std::string_view name, std::span<const uint64_t> ne) {
                                  return name.find("attn_output") != std::string_view::npos && ne[0] % 256 == 0
                                             ? latte::GgmlType::q4_k
                                             : latte::GgmlType::f32;
                                }});
    CHECK_NOTHROW((void)latte::detail::plan_tensor_parallel(latte::gguf::File::from_bytes(q4), c, {.world_size = 2}));
    const latte::Error e = error_of([&] { (void)load(q4, {.tensor_parallel = 4}); });
    CHECK(e.code() == latte::ErrorCode::unsupported);
    const std::string msg = e.what();
    CHECK(msg.find("blk.0.attn_output.weight") != std::string::npos);
    CHECK(msg.find("block") != std::string::npos);
    CHECK(msg.find("256") != std::string::npos);
  }
  SUBCASE("experts not divisible") {
    latte::ModelConfig odd = latte::model_preset("test-glm-flash");
    odd.n_expert = 6;
    odd.n_expert_used = 2;
    const latte::Error e = error_of([&] { (void)load(model_bytes(odd), {.tensor_parallel = 4}); });
    CHECK(std::string(e.what()).find("ffn_gate_exps") != std::string::npos);
    CHECK(std::string(e.what()).find("6 experts") != std::string::npos);
  }
  CHECK(error_of([&] { (void)load(bytes, {.tensor_parallel = 0}); }).code() == latte::ErrorCode::invalid_argument);
}

TEST_CASE("2 and 4 in-process ranks give the unsharded model's logits on every flavour") {
  const std::string backend = latte::test::attention_backend();
  for (std::string_view flavour : latte::test::kTestFlavours) {
    const latte::ModelConfig c = latte::model_preset(flavour);
    const auto bytes = model_bytes(c, {.seed = fresh_seed()});
    const latte::Model reference = load(bytes);
    // Long enough for glm-dsa's indexer (top_k 16) to select sparsely.
    const auto prefill = latte::test::fresh_tokens(20, c.n_vocab);
    const auto decode = latte::test::fresh_tokens(3, c.n_vocab);
    const auto expected = latte::test::prefill_then_decode(reference, backend, prefill, decode, 2);
    for (int tp : {2, 4}) {
      for (latte::MoeSplit moe : {latte::MoeSplit::expert_parallel, latte::MoeSplit::tensor_parallel}) {
        INFO(flavour << " backend " << backend << " TP " << tp << " MoE " << latte::detail::moe_split_name(moe));
        const latte::Model sharded = load(bytes, {.tensor_parallel = tp, .moe_split = moe});
        const auto got = latte::test::prefill_then_decode(sharded, backend, prefill, decode, 2);
        CHECK(latte::test::relative_error(got, expected) <= kFp32Tolerance);
      }
    }
  }
}

TEST_CASE("a tensor-parallel session truncates, resets and continues like the unsharded one") {
  const latte::ModelConfig c = latte::model_preset("test-glm-dsa");
  const auto bytes = model_bytes(c, {.seed = fresh_seed()});
  const std::string backend = latte::test::attention_backend();
  latte::Session ref(load(bytes), {.n_ctx = 64, .attention = backend, .n_threads = 2});
  latte::Session tp(load(bytes, {.tensor_parallel = 2}), {.n_ctx = 64, .attention = backend, .n_threads = 2});
  const auto a = latte::test::fresh_tokens(24, c.n_vocab);
  const auto b = latte::test::fresh_tokens(5, c.n_vocab);
  for (latte::Session* s : {&ref, &tp}) {
    s->eval(a);
    s->truncate(10);
    s->eval(b);
  }
  CHECK(latte::test::relative_error(tp.logits(), ref.logits()) <= kFp32Tolerance);
  for (latte::Session* s : {&ref, &tp}) {
    s->reset();
    s->eval(b);
  }
  CHECK(latte::test::relative_error(tp.logits(), ref.logits()) <= kFp32Tolerance);
}

namespace {

/// Logits of `tokens` through create_tensor_parallel_cpu_forward over a shard set the caller may
/// have tampered with.
std::vector<float> run_shards(const latte::ModelConfig& config, std::span<const std::byte> bytes,
                              std::shared_ptr<const latte::detail::TensorParallelModel> shards,
                              std::span<const latte::Token> tokens) {
  latte::detail::ModelState state(latte::gguf::File::from_bytes(bytes), latte::Device::cpu());
  state.config = config;
  state.audit = latte::audit_weights(state.file, config);
  state.weights = latte::detail::map_weights(state.file, config, state.audit);
  state.tensor_parallel = std::move(shards);
  auto forward = latte::detail::create_tensor_parallel_cpu_forward(state, latte::test::attention_backend(), 2);
  latte::detail::KvCache cache(config.n_layer_main(), {.values_per_token = 1}, 0, 64);
  const latte::detail::BatchSequence seq{.cache = &cache, .first_row = 0, .n_tokens = static_cast<int>(tokens.size())};
  const int last = static_cast<int>(tokens.size()) - 1;
  std::vector<float> logits(static_cast<size_t>(config.n_vocab), NAN);
  forward->run(
      {.tokens = tokens, .sequences = std::span(&seq, 1), .logit_rows = std::span(&last, 1), .logits = logits.data()});
  return logits;
}

}  // namespace

TEST_CASE("fused projections keep their order per shard: swapping shards breaks the logits") {
  const latte::ModelConfig c = latte::model_preset("test-v3");
  const auto bytes = model_bytes(c, {.seed = fresh_seed()});
  const latte::Model model = load(bytes, {.tensor_parallel = 2, .moe_split = latte::MoeSplit::tensor_parallel});
  const auto tokens = latte::test::fresh_tokens(6, c.n_vocab);
  const auto expected = latte::test::all_logits(load(bytes), latte::test::attention_backend(), tokens, 2);
  const std::span<const float> last(expected.data() + expected.size() - static_cast<size_t>(c.n_vocab),
                                    static_cast<size_t>(c.n_vocab));
  const auto& good = *model.state().tensor_parallel;
  CHECK(latte::test::relative_error(run_shards(c, bytes, model.state().tensor_parallel, tokens), last) <=
        kFp32Tolerance);

  // The gate|up pairs of rank 0 and rank 1 swapped for one half only: each rank's gate shard no
  // longer matches its up shard (dense block 0 and the routed experts of block 1).
  auto swap_gate = [&](auto member) {
    auto bad = std::make_shared<latte::detail::TensorParallelModel>();
    bad->plan = good.plan;
    for (const auto& r : good.ranks) {
      bad->ranks.push_back({.rank = r.rank,
                            .config = r.config,
                            .weights = r.weights,
                            .expert_first = r.expert_first,
                            .expert_count = r.expert_count});
    }
    for (size_t il = 0; il < bad->ranks[0].weights.layers.size(); ++il) {
      std::swap(bad->ranks[0].weights.layers[il].*member, bad->ranks[1].weights.layers[il].*member);
    }
    return std::shared_ptr<const latte::detail::TensorParallelModel>(bad, bad.get());
  };
  for (auto member : {&latte::detail::LayerWeights::ffn_gate, &latte::detail::LayerWeights::ffn_gate_exps,
                      &latte::detail::LayerWeights::ffn_up_shexp}) {
    // Keep the good model (and its repacked buffers) alive while the tampered views point into it.
    const double err = latte::test::relative_error(run_shards(c, bytes, swap_gate(member), tokens), last);
    CHECK(err > 1e-3);
  }
}

TEST_CASE("a GLM-5-shaped layer at TP 4 and TP 8 gives the unsharded logits") {
  // The real per-layer widths (H 6144, 64 heads, Lq 2048, L 512, P 192, R 64, V 256, expert width
  // 2048, the 32 x 128 indexer) with one MoE block of 4 experts (1 active) plus the shared expert and
  // a small vocabulary, in q8_0: ~280 M parameters, ~20 s on two cores, so not under sanitizers.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  MESSAGE("skipped under sanitizers (a 280 M-parameter model)");
  return;
#endif
  latte::ModelConfig c = latte::model_preset("glm-5");
  c.name = "glm-5-one-layer";
  c.n_nextn_layer = 0;
  c.n_layer = 1;
  c.n_dense_lead = 0;
  c.n_expert = 4;
  c.n_expert_used = 1;
  c.n_expert_group = 1;
  c.n_expert_group_used = 1;
  c.n_vocab = 256;
  c.indexer.top_k = 2;  // the 3rd and 4th tokens already select sparsely
  const auto bytes = model_bytes(
      c, {.seed = fresh_seed(),
          .tensor_type =
              [](std::string_view, std::span<const uint64_t> ne) {
                return ne.size() >= 2 && ne[1] >= 64 && ne[0] % 32 == 0 ? latte::GgmlType::q8_0 : latte::GgmlType::f32;
              },
          .n_threads = 2});
  const auto tokens = latte::test::fresh_tokens(4, c.n_vocab);
  const std::string backend = latte::test::attention_backend();
  const auto expected = latte::test::all_logits(load(bytes), backend, tokens, 2);
  for (int tp : {4, 8}) {
    INFO("TP " << tp);
    const latte::MoeSplit moe = tp == 8 ? latte::MoeSplit::tensor_parallel : latte::MoeSplit::expert_parallel;
    const latte::Model sharded = load(bytes, {.tensor_parallel = tp, .moe_split = moe});
    CHECK(sharded.state().tensor_parallel->plan.heads_per_rank == 64 / tp);
    CHECK(latte::test::relative_error(latte::test::all_logits(sharded, backend, tokens, 2), expected) <=
          kFp32Tolerance);
  }
}

TEST_CASE("another forward pass of the same tensor-parallel model continues a sequence") {
  // A batched step may run one session's sequence through another session's forward pass: the
  // per-rank caches travel with the sequence.
  const latte::ModelConfig c = latte::model_preset("test-v3");
  const auto bytes = model_bytes(c, {.seed = fresh_seed()});
  const latte::Model model = load(bytes, {.tensor_parallel = 2});
  const auto tokens = latte::test::fresh_tokens(9, c.n_vocab);
  const auto expected = latte::test::all_logits(load(bytes), latte::test::attention_backend(), tokens, 2);
  const std::string backend = latte::test::attention_backend();
  auto first = latte::detail::create_tensor_parallel_cpu_forward(model.state(), backend, 2);
  auto second = latte::detail::create_tensor_parallel_cpu_forward(model.state(), backend, 2);
  latte::detail::KvCache cache(c.n_layer_main(), {.values_per_token = 1}, 0, 64);
  std::vector<float> logits(static_cast<size_t>(c.n_vocab), NAN);
  const int last = 0;
  for (int t = 0; t < 9; ++t) {
    const latte::detail::BatchSequence seq{.cache = &cache, .first_row = 0, .n_tokens = 1};
    (t % 2 ? *second : *first)
        .run({.tokens = std::span(tokens).subspan(static_cast<size_t>(t), 1),
              .sequences = std::span(&seq, 1),
              .logit_rows = std::span(&last, 1),
              .logits = logits.data()});
  }
  CHECK(cache.n_tokens() == 9);
  const std::span<const float> want(expected.data() + 8 * static_cast<size_t>(c.n_vocab),
                                    static_cast<size_t>(c.n_vocab));
  CHECK(latte::test::relative_error(logits, want) <= kFp32Tolerance);
}
