// The GPU self-test's case list, on the host: every kernel family for a model with MoE and an indexer,
// shapes and parameters taken from the model's config, one GEMV/GEMM case per weight type present,
// and the preset plan without a model.
#include "diagnostics/selftest_plan.hpp"
#include "model/presets.hpp"
#include "model/random_model.hpp"

#include <latte/diagnostics.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

using latte::GgmlType;
using namespace latte::diagnostics::detail;

latte::Model random_model(const latte::ModelConfig& config, latte::RandomModelOptions options = {}) {
  return latte::Model::from_file(latte::gguf::File::from_bytes(latte::random_model_bytes(config, options), "m.gguf"));
}

std::set<SelftestFamily> families(const SelftestPlan& plan) {
  std::set<SelftestFamily> out;
  for (const SelftestCase& c : plan.cases) out.insert(c.family);
  return out;
}

std::vector<const SelftestCase*> of(const SelftestPlan& plan, SelftestFamily family) {
  std::vector<const SelftestCase*> out;
  for (const SelftestCase& c : plan.cases) {
    if (c.family == family) out.push_back(&c);
  }
  return out;
}

}  // namespace

TEST_CASE("the self-test plan of a MoE model with an indexer covers every kernel family at its shapes") {
  latte::ModelConfig config = latte::model_preset("test-glm-dsa");
  // Perturb what the plan must follow, so that a plan copying preset numbers would not pass.
  config.n_expert_used = 3;
  config.indexer.top_k = 24;
  config.rope_scaling = {.type = latte::RopeScalingType::yarn, .factor = 8.0f, .original_context_length = 512};
  const latte::Model model = random_model(config, {.seed = 11});
  const latte::ModelConfig& c = model.config();
  const SelftestPlan plan = selftest_plan(selftest_target(model));
  INFO(latte::diagnostics::selftest_case_list(&model));

  const auto all = all_families();
  CHECK(all.size() == 17);
  CHECK(families(plan) == std::set<SelftestFamily>(all.begin(), all.end()));
  CHECK(plan.not_covered.empty());
  CHECK(plan.label.find(c.name) != std::string::npos);

  // Weight products: rows = the kv_a width L + R, k = the hidden size, GEMV 1 and 4 tokens, GEMM past 8.
  for (const SelftestCase* m : of(plan, SelftestFamily::gemv)) {
    CHECK(m->rows == c.kv_lora_rank + c.qk_rope_head_dim);
    CHECK(m->k == c.n_embd);
    CHECK(m->token_counts == std::vector<int>{1, 4});
  }
  // GEMM: a product past the 8-row GEMV and below the 17 rows from which Linear dequantizes for cuBLAS (so the
  // fused GEMM runs), and one of 128 rows (cuBLAS)
  for (const SelftestCase* m : of(plan, SelftestFamily::gemm)) {
    CHECK(m->token_counts.at(0) > 8);
    CHECK(m->token_counts.at(0) < 17);
    CHECK(m->token_counts.at(1) == 128);
  }

  // Norm widths: hidden, latent, query latent; the residual variant at the hidden size.
  std::set<int> widths;
  for (const SelftestCase* n : of(plan, SelftestFamily::rms_norm)) widths.insert(n->k);
  CHECK(widths == std::set<int>{c.n_embd, c.kv_lora_rank, c.q_lora_rank});
  CHECK(of(plan, SelftestFamily::rms_norm_residual).at(0)->k == c.n_embd);
  CHECK(of(plan, SelftestFamily::layer_norm).at(0)->k == c.indexer.head_dim);

  // RoPE: q heads after P nope dims, k_pe after the latent, the indexer's first R dims; YaRN on.
  const auto ropes = of(plan, SelftestFamily::rope_yarn);
  REQUIRE(ropes.size() == 3);
  const SelftestRope& q = ropes[0]->rope;
  CHECK(q.n_heads == c.n_head);
  CHECK(q.head_stride == c.qk_head_dim());
  CHECK(q.rot_offset == c.qk_nope_head_dim);
  CHECK(q.n_rot == c.qk_rope_head_dim);
  CHECK(q.ext_factor == 1.0f);
  CHECK(q.freq_scale == doctest::Approx(1.0 / 8.0));
  CHECK(q.n_ctx_orig == 512);
  CHECK(q.scaling == c.rope_scaling);
  CHECK(ropes[1]->rope.rot_offset == c.kv_lora_rank);
  CHECK(ropes[2]->rope.n_heads == c.indexer.n_head);
  CHECK(ropes[2]->rope.head_stride == c.indexer.head_dim);
  CHECK(ropes[2]->name.find("yarn") != std::string::npos);

  // Router at the model's expert count, k, groups and gating; dispatch over a few experts.
  const SelftestMoe& router = of(plan, SelftestFamily::moe_router).at(0)->moe;
  CHECK(router.n_experts == c.n_expert);
  CHECK(router.k == 3);
  CHECK(router.n_groups == c.n_expert_group);
  CHECK(router.groups_used == c.n_expert_group_used);
  CHECK(router.sigmoid == (c.expert_gating == latte::ExpertGating::sigmoid));
  CHECK(router.bias);  // the random glm-dsa model has exp_probs_b
  CHECK(router.scale == c.expert_weights_scale);
  for (SelftestFamily f : {SelftestFamily::moe_decode, SelftestFamily::moe_prefill}) {
    const SelftestCase& x = *of(plan, f).at(0);
    CHECK(x.moe.hidden == c.n_embd);
    CHECK(x.moe.k == 2);
    CHECK(x.moe.n_experts > x.moe.k);
    CHECK(x.moe.n_experts <= c.n_expert);
    CHECK(x.moe.ffn <= c.n_ff_expert);
    CHECK(x.moe.ffn % 32 == 0);
  }
  CHECK(of(plan, SelftestFamily::moe_decode).at(0)->rows <= 8);
  CHECK(of(plan, SelftestFamily::moe_prefill).at(0)->rows > 8);

  // Attention at the model's heads and head dims, with its softmax scale.
  const SelftestCase& mla = *of(plan, SelftestFamily::mla_decode).at(0);
  CHECK(mla.n_heads == c.n_head);
  CHECK(mla.scale == c.attention_scale());
  std::set<int> tiles;  // both tilings of the 16-row kernel where a sequence's heads fit it
  for (const SelftestCase* m : of(plan, SelftestFamily::mla_decode)) tiles.insert(m->tile_tokens);
  CHECK(tiles == (c.n_head <= 32 ? std::set<int>{32, 64} : std::set<int>{64}));
  const SelftestCase& standard = *of(plan, SelftestFamily::standard_decode).at(0);
  CHECK(standard.head_dim_qk == c.qk_head_dim());
  CHECK(standard.head_dim_v == c.v_head_dim);
  const auto prefills = of(plan, SelftestFamily::flash_prefill);
  REQUIRE(prefills.size() == 2);  // dense and, with an indexer, sparse
  for (const SelftestCase* p : prefills) {
    CHECK(p->head_dim_qk == c.qk_head_dim());
    CHECK(p->head_dim_v == c.v_head_dim);
    CHECK(p->kv_lens.size() == 2);
    CHECK(p->kv_lens[1] > 64);  // more than one query tile
  }
  CHECK(prefills[1]->top_k > 0);
  const SelftestCase& ix = *of(plan, SelftestFamily::dsa_indexer).at(0);
  CHECK(ix.top_k == 24);
  CHECK(ix.n_heads == c.indexer.n_head);
  CHECK(ix.head_dim_qk == c.indexer.head_dim);
  CHECK(ix.kv_lens.at(0) > ix.top_k);  // a real selection
  CHECK(ix.kv_lens.at(1) < ix.top_k);  // fewer positions than top_k: all of them
  const auto appends = of(plan, SelftestFamily::kv_append);
  REQUIRE(appends.size() == 2);
  CHECK(appends[0]->head_dim_qk == c.kv_lora_rank + c.qk_rope_head_dim);
  CHECK(appends[0]->k == c.kv_lora_rank);
  CHECK(appends[1]->n_heads == c.n_head);

  for (const SelftestCase& k : plan.cases) {
    INFO(k.name);
    CHECK(!k.name.empty());
    CHECK(!k.shape.empty());
    CHECK(k.bound >= 0);
    CHECK(k.bound < 0.05);
  }
}

TEST_CASE("the self-test plan checks each weight type present in the model, and only those") {
  const latte::ModelConfig config = latte::model_preset("test-v3");
  latte::RandomModelOptions options{.seed = 3};
  options.tensor_type = [](std::string_view name, std::span<const uint64_t> ne) {
    if (ne.size() < 2 || ne[0] % 32 != 0) return GgmlType::f32;
    if (name.find("ffn_down_exps") != std::string_view::npos) return GgmlType::q8_0;  // k = F, not 256-aligned
    if (ne[0] % 256 != 0) return GgmlType::f32;
    if (name.find("_exps") != std::string_view::npos) return GgmlType::q4_k;
    if (name.starts_with("token_embd")) return GgmlType::q6_k;
    return GgmlType::q5_0;
  };
  const latte::Model model = random_model(config, options);
  std::set<GgmlType> in_file;
  for (const auto& t : model.file().tensors()) {
    if (t.n_dims >= 2 && t.name != "token_embd.weight") in_file.insert(t.type);
  }
  const SelftestPlan plan = selftest_plan(selftest_target(model));
  std::set<GgmlType> gemv, gemm;
  for (const SelftestCase* c : of(plan, SelftestFamily::gemv)) gemv.insert(c->type);
  for (const SelftestCase* c : of(plan, SelftestFamily::gemm)) gemm.insert(c->type);
  CHECK(gemv == in_file);
  CHECK(gemm == in_file);
  CHECK(in_file.contains(GgmlType::q5_0));
  CHECK(in_file.contains(GgmlType::q4_k));
  const SelftestCase& experts = *of(plan, SelftestFamily::moe_prefill).at(0);
  CHECK(experts.moe.gate_type == GgmlType::q4_k);
  CHECK(experts.moe.up_type == GgmlType::q4_k);
  CHECK(experts.moe.down_type == GgmlType::q8_0);
  CHECK(experts.moe.ffn % 32 == 0);  // the k of the down projection holds whole q8_0 blocks
  CHECK(experts.moe.ffn <= config.n_ff_expert);
  CHECK(experts.moe.hidden == config.n_embd);
  CHECK(of(plan, SelftestFamily::embedding).at(0)->type == GgmlType::q6_k);
  // test-v3 has no indexer: no DSA case, no sparse prefill.
  CHECK(of(plan, SelftestFamily::dsa_indexer).empty());
  CHECK(of(plan, SelftestFamily::layer_norm).empty());
  CHECK(of(plan, SelftestFamily::flash_prefill).size() == 1);
}

TEST_CASE("the preset self-test plan covers every family and every GPU weight type, each case once") {
  const SelftestPlan plan = selftest_default_plan();
  const auto all = all_families();
  CHECK(families(plan) == std::set<SelftestFamily>(all.begin(), all.end()));
  std::set<GgmlType> types;
  for (const SelftestCase* c : of(plan, SelftestFamily::gemv)) types.insert(c->type);
  for (GgmlType t : {GgmlType::f32, GgmlType::f16, GgmlType::bf16, GgmlType::q4_0, GgmlType::q8_0, GgmlType::mxfp4,
                     GgmlType::q2_k, GgmlType::q4_k, GgmlType::q6_k, GgmlType::iq4_nl, GgmlType::iq4_xs}) {
    CHECK(types.contains(t));
  }
  std::set<std::pair<std::string, std::string>> seen;
  for (const SelftestCase& c : plan.cases) CHECK(seen.insert({c.name, c.shape}).second);
  // deepseek-v3's 128 heads and glm-5's (256, 256) head dims are both there.
  bool v3_heads = false, glm_dims = false;
  for (const SelftestCase* c : of(plan, SelftestFamily::mla_decode)) v3_heads = v3_heads || c->n_heads == 128;
  for (const SelftestCase* c : of(plan, SelftestFamily::flash_prefill)) glm_dims = glm_dims || c->head_dim_qk == 256;
  CHECK(v3_heads);
  CHECK(glm_dims);
  const std::string list = latte::diagnostics::selftest_case_list(nullptr);
  CHECK(list.starts_with("self-test cases at the shapes of presets"));
  CHECK(list.find("dsa_indexer") != std::string::npos);
}

TEST_CASE("IQ4_NL and IQ4_XS get self-test cases; the grid IQ types (no CPU encoder) are listed as not covered") {
  const SelftestPlan plan =
      selftest_plan(selftest_preset_target("deepseek-v3", {GgmlType::iq4_nl, GgmlType::iq4_xs, GgmlType::iq2_xxs}));
  std::set<GgmlType> gemv, dequantize;
  for (const SelftestCase* c : of(plan, SelftestFamily::gemv)) gemv.insert(c->type);
  for (const SelftestCase* c : of(plan, SelftestFamily::dequantize)) dequantize.insert(c->type);
  CHECK(gemv == std::set<GgmlType>{GgmlType::iq4_nl, GgmlType::iq4_xs});
  CHECK(dequantize == gemv);
  REQUIRE(plan.not_covered.size() == 1);
  CHECK(plan.not_covered[0].starts_with("iq2_xxs: no CPU encoder"));
}
