// latte's CPU forward pass against Hugging Face transformers (the oracle fixtures in
// tests/data/oracle: random-weight checkpoints of every supported family with the float32 logits
// and greedy continuations transformers computed for them). The HF checkpoint is mapped onto GGUF
// tensor names here, independently of latte's converter, with both K/V layouts written.
//
// The fixture generator rounds the weights to bf16 but keeps the rotary inv_freq buffer in float32
// (rounding it too would shift the references by ~3e-4, growing with the position).
#include "model/kv_b.hpp"
#include "support/random_models.hpp"
#include "support/safetensors.hpp"
#include "support/test_options.hpp"

#include <latte/gguf.hpp>
#include <latte/model.hpp>
#include <latte/quant.hpp>
#include <latte/session.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace {

// Both sides compute in float32 from the same bf16-exact weights, in different orders.
constexpr double kOracleTolerance = 1e-5;

using nlohmann::json;

latte::ModelConfig config_from_hf(const json& hf) {
  latte::ModelConfig c;
  const std::string type = hf.at("model_type");
  c.arch = type == "glm_moe_dsa" ? latte::Architecture::glm_dsa : latte::Architecture::deepseek2;
  c.name = type;
  c.n_vocab = hf.at("vocab_size");
  c.context_length = hf.at("max_position_embeddings");
  c.n_embd = hf.at("hidden_size");
  c.n_layer = hf.at("num_hidden_layers");
  c.n_dense_lead = hf.at("first_k_dense_replace");
  if (hf.contains("mlp_layer_types")) {
    c.n_dense_lead = 0;
    while (c.n_dense_lead < c.n_layer && hf["mlp_layer_types"][static_cast<size_t>(c.n_dense_lead)] == "dense") {
      ++c.n_dense_lead;
    }
  }
  c.n_ff = hf.at("intermediate_size");
  c.n_ff_expert = hf.at("moe_intermediate_size");
  c.n_expert = hf.at("n_routed_experts");
  c.n_expert_used = hf.at("num_experts_per_tok");
  c.n_expert_shared = hf.at("n_shared_experts");
  c.n_expert_group = hf.at("n_group");
  c.n_expert_group_used = hf.at("topk_group");
  c.expert_weights_scale = hf.at("routed_scaling_factor");
  c.expert_weights_norm = hf.at("norm_topk_prob");
  c.expert_gating = type == "deepseek_v2" ? latte::ExpertGating::softmax : latte::ExpertGating::sigmoid;
  c.n_head = hf.at("num_attention_heads");
  c.q_lora_rank = hf.at("q_lora_rank").is_null() ? 0 : hf.at("q_lora_rank").get<int>();
  c.kv_lora_rank = hf.at("kv_lora_rank");
  c.qk_nope_head_dim = hf.at("qk_nope_head_dim");
  c.qk_rope_head_dim = hf.at("qk_rope_head_dim");
  c.v_head_dim = hf.at("v_head_dim");
  c.rms_norm_eps = hf.at("rms_norm_eps");
  const json& rope = hf.at("rope_parameters");
  c.rope_freq_base = rope.at("rope_theta");
  if (rope.at("rope_type") == "yarn") {
    c.rope_scaling = {.type = latte::RopeScalingType::yarn,
                      .factor = rope.at("factor"),
                      .original_context_length = rope.at("original_max_position_embeddings"),
                      .yarn_beta_fast = rope.at("beta_fast"),
                      .yarn_beta_slow = rope.at("beta_slow"),
                      .yarn_log_multiplier = 0.1f * rope.at("mscale_all_dim").get<float>()};
  }
  if (c.arch == latte::Architecture::glm_dsa) {
    c.indexer = {.n_head = hf.at("index_n_heads"), .head_dim = hf.at("index_head_dim"), .top_k = hf.at("index_topk")};
  }
  return c;
}

/// GGUF name of an HF tensor name (empty when it is not mapped).
std::string gguf_name(const std::string& hf) {
  static const std::pair<const char*, const char*> kGlobal[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  for (auto [from, to] : kGlobal) {
    if (hf == from) return to;
  }
  static const std::pair<const char*, const char*> kBlock[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
      {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
      {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
      {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
      {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"mlp.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
      {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
      {"self_attn.indexer.wq_b.weight", "indexer.attn_q_b.weight"},
      {"self_attn.indexer.wk.weight", "indexer.attn_k.weight"},
      {"self_attn.indexer.k_norm.weight", "indexer.k_norm.weight"},
      {"self_attn.indexer.k_norm.bias", "indexer.k_norm.bias"},
      {"self_attn.indexer.weights_proj.weight", "indexer.proj.weight"},
  };
  const std::string prefix = "model.layers.";
  if (hf.rfind(prefix, 0) != 0) return {};
  const size_t dot = hf.find('.', prefix.size());
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  const std::string rest = hf.substr(dot + 1);
  for (auto [from, to] : kBlock) {
    if (rest == from) return "blk." + layer + "." + to;
  }
  return {};
}

struct PlannedTensor {
  std::string name;
  std::vector<uint64_t> ne;
  std::vector<float> values;
};

/// GGUF bytes (bf16 tensors) of an oracle checkpoint: both K/V layouts, experts stacked.
std::vector<std::byte> gguf_from_checkpoint(const std::string& dir, const latte::ModelConfig& c) {
  const latte::test::Safetensors st(dir + "/model.safetensors");
  std::vector<PlannedTensor> planned;
  for (const auto& [name, t] : st.tensors()) {
    const std::string to = gguf_name(name);
    if (to.empty()) continue;
    std::vector<uint64_t> ne(t.shape.rbegin(), t.shape.rend());  // PyTorch [out, in] -> ggml {in, out}
    planned.push_back({to, ne, st.floats(name)});
  }
  const auto E = static_cast<uint64_t>(c.n_expert), F = static_cast<uint64_t>(c.n_ff_expert);
  const auto H = static_cast<uint64_t>(c.n_embd);
  for (int il = c.n_dense_lead; il < c.n_layer; ++il) {
    const std::string hf = "model.layers." + std::to_string(il) + ".mlp.experts.";
    const std::string gg = "blk." + std::to_string(il) + ".";
    for (const char* part : {"gate_proj", "up_proj", "down_proj"}) {
      std::vector<float> stacked;
      for (uint64_t e = 0; e < E; ++e) {
        const auto v = st.floats(hf + std::to_string(e) + "." + part + ".weight");
        stacked.insert(stacked.end(), v.begin(), v.end());
      }
      const std::string p = part;
      if (p == "down_proj") {
        planned.push_back({gg + "ffn_down_exps.weight", {F, H, E}, std::move(stacked)});
      } else {
        planned.push_back(
            {gg + (p == "gate_proj" ? "ffn_gate_exps.weight" : "ffn_up_exps.weight"), {H, F, E}, std::move(stacked)});
      }
    }
  }
  // The split layout too, from the fused one.
  const latte::KvBDims dims{.n_head = c.n_head,
                            .kv_lora_rank = c.kv_lora_rank,
                            .qk_nope_head_dim = c.qk_nope_head_dim,
                            .v_head_dim = c.v_head_dim};
  const auto L = static_cast<uint64_t>(c.kv_lora_rank), P = static_cast<uint64_t>(c.qk_nope_head_dim);
  const auto V = static_cast<uint64_t>(c.v_head_dim), N = static_cast<uint64_t>(c.n_head);
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string gg = "blk." + std::to_string(il) + ".";
    const auto fused = std::find_if(planned.begin(), planned.end(),
                                    [&](const PlannedTensor& t) { return t.name == gg + "attn_kv_b.weight"; });
    REQUIRE(fused != planned.end());
    std::vector<float> k_b(N * L * P), v_b(N * V * L);
    latte::split_kv_b(fused->values, dims, k_b, v_b);
    planned.push_back({gg + "attn_k_b.weight", {P, L, N}, std::move(k_b)});
    planned.push_back({gg + "attn_v_b.weight", {L, V, N}, std::move(v_b)});
  }

  latte::gguf::Writer w;
  c.write_gguf_metadata(w);
  for (const auto& t : planned) w.add_tensor(t.name, latte::GgmlType::bf16, t.ne);
  return w.write_to_memory([&](size_t i, std::span<std::byte> dst) {
    const auto& v = planned[i].values;
    for (size_t j = 0; j < v.size(); ++j) {
      const uint16_t b = latte::fp32_to_bf16(v[j]);  // exact: the checkpoint's values are bf16
      std::memcpy(dst.data() + 2 * j, &b, 2);
    }
  });
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);
}

}  // namespace

TEST_CASE("the CPU forward pass matches transformers on every oracle flavour") {
  const std::string root = latte::test::data_path("oracle");
  const std::string backend = latte::test::attention_backend();
  for (const char* flavour : {"deepseek-v2-lite", "deepseek-v3", "glm-4.7-flash", "glm-5-dense", "glm-5-sparse"}) {
    CAPTURE(flavour);
    const std::string dir = root + "/" + flavour;
    const latte::ModelConfig config = config_from_hf(read_json(dir + "/config.json"));
    auto bytes = gguf_from_checkpoint(dir, config);
    const latte::Model model = latte::Model::from_file(latte::gguf::File::from_bytes(bytes, flavour));
    const latte::test::Safetensors ref(dir + "/reference.safetensors");
    const auto prompt = ref.ints("prompt");
    const auto expected = ref.floats("logits");

    const auto logits = latte::test::all_logits(model, backend, prompt);
    const double error = latte::test::relative_error(logits, expected);

    // Greedy continuation: the prompt once, then one token per eval.
    latte::Session s(model, {.n_ctx = 64, .attention = backend});
    s.eval(prompt);
    std::vector<int32_t> greedy;
    for (int i = 0; i < 16; ++i) {
      const auto l = s.logits();
      const latte::Token next = static_cast<latte::Token>(std::max_element(l.begin(), l.end()) - l.begin());
      greedy.push_back(next);
      s.eval(std::span(&next, 1));
    }
    std::printf("oracle %-17s %-8s logits error %.3g (greedy %s)\n", flavour, backend.c_str(), error,
                greedy == ref.ints("greedy") ? "equal" : "different");
    CHECK(error <= kOracleTolerance);
    CHECK(greedy == ref.ints("greedy"));
  }
}
