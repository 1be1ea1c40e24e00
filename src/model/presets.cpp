// Named ModelConfigs. The released models' values come from their config.json files (HF names in
// the comments); the test flavours keep the real per-head dimensions with few layers, heads and
// experts so that the suite stays fast.
#include "model/presets.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <array>
#include <string>

namespace latte {

namespace {

constexpr std::array<std::string_view, 8> kNames{
    "test-v2-lite",     "test-v3",     "test-glm-dsa",  "test-glm-flash",
    "deepseek-v2-lite", "deepseek-v3", "glm-4.7-flash", "glm-5",
};

// DeepSeek-V2(-Lite) YaRN: factor 40, original_max_position_embeddings 4096, beta_fast 32,
// beta_slow 1, mscale = mscale_all_dim = 0.707 (GGUF stores 0.1 * mscale_all_dim).
RopeScaling deepseek_v2_yarn() {
  return {.type = RopeScalingType::yarn,
          .factor = 40.0f,
          .original_context_length = 4096,
          .yarn_beta_fast = 32.0f,
          .yarn_beta_slow = 1.0f,
          .yarn_log_multiplier = 0.0707f};
}

// DeepSeek-V3 YaRN: as V2 but mscale = mscale_all_dim = 1.0.
RopeScaling deepseek_v3_yarn() {
  RopeScaling r = deepseek_v2_yarn();
  r.yarn_log_multiplier = 0.1f;
  return r;
}

ModelConfig deepseek_v2_lite() {
  ModelConfig c;
  c.arch = Architecture::deepseek2;
  c.name = "DeepSeek-V2-Lite";
  c.n_vocab = 102400;             // vocab_size
  c.context_length = 163840;      // max_position_embeddings
  c.n_embd = 2048;                // hidden_size
  c.n_layer = 27;                 // num_hidden_layers
  c.n_dense_lead = 1;             // first_k_dense_replace
  c.n_ff = 10944;                 // intermediate_size
  c.n_ff_expert = 1408;           // moe_intermediate_size
  c.n_expert = 64;                // n_routed_experts
  c.n_expert_used = 6;            // num_experts_per_tok
  c.n_expert_shared = 2;          // n_shared_experts
  c.expert_weights_scale = 1.0f;  // routed_scaling_factor
  c.expert_weights_norm = false;  // norm_topk_prob
  c.expert_gating = ExpertGating::softmax;
  c.n_head = 16;      // num_attention_heads
  c.q_lora_rank = 0;  // q_lora_rank: null
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.rms_norm_eps = 1e-6f;
  c.rope_freq_base = 10000.0f;
  c.rope_scaling = deepseek_v2_yarn();
  return c;
}

ModelConfig deepseek_v3() {
  ModelConfig c;
  c.arch = Architecture::deepseek2;
  c.name = "DeepSeek-V3";
  c.n_vocab = 129280;
  c.context_length = 163840;
  c.n_embd = 7168;
  c.n_layer = 61;  // llama.cpp's converter drops the MTP block (num_nextn_predict_layers 1)
  c.n_dense_lead = 3;
  c.n_ff = 18432;
  c.n_ff_expert = 2048;
  c.n_expert = 256;
  c.n_expert_used = 8;
  c.n_expert_shared = 1;
  c.n_expert_group = 8;       // n_group
  c.n_expert_group_used = 4;  // topk_group
  c.expert_weights_scale = 2.5f;
  c.expert_weights_norm = true;
  c.expert_gating = ExpertGating::sigmoid;  // scoring_func
  c.n_head = 128;
  c.q_lora_rank = 1536;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.rms_norm_eps = 1e-6f;
  c.rope_freq_base = 10000.0f;
  c.rope_scaling = deepseek_v3_yarn();
  return c;
}

ModelConfig glm_47_flash() {
  ModelConfig c;
  c.arch = Architecture::deepseek2;  // Glm4MoeLiteForCausalLM converts to deepseek2
  c.name = "GLM-4.7-Flash";
  c.n_vocab = 154880;
  c.context_length = 202752;
  c.n_embd = 2048;
  c.n_layer = 48;  // 47 + 1 MTP block
  c.n_nextn_layer = 1;
  c.n_dense_lead = 1;
  c.n_ff = 10240;
  c.n_ff_expert = 1536;
  c.n_expert = 64;
  c.n_expert_used = 4;
  c.n_expert_shared = 1;
  c.expert_weights_scale = 1.8f;
  c.expert_weights_norm = true;
  c.expert_gating = ExpertGating::sigmoid;
  c.n_head = 20;
  c.q_lora_rank = 768;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 192;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 256;
  c.rms_norm_eps = 1e-5f;
  c.rope_freq_base = 1000000.0f;
  return c;
}

ModelConfig glm_5() {
  ModelConfig c;
  c.arch = Architecture::glm_dsa;
  c.name = "GLM-5";
  c.n_vocab = 154880;
  c.context_length = 202752;
  c.n_embd = 6144;
  c.n_layer = 79;  // 78 + 1 MTP block
  c.n_nextn_layer = 1;
  c.n_dense_lead = 3;
  c.n_ff = 12288;
  c.n_ff_expert = 2048;
  c.n_expert = 256;
  c.n_expert_used = 8;
  c.n_expert_shared = 1;
  c.expert_weights_scale = 2.5f;
  c.expert_weights_norm = true;
  c.expert_gating = ExpertGating::sigmoid;
  c.n_head = 64;
  c.q_lora_rank = 2048;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 192;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 256;
  c.rms_norm_eps = 1e-5f;
  c.rope_freq_base = 1000000.0f;
  c.indexer = {.n_head = 32, .head_dim = 128, .top_k = 2048};  // index_n_heads, index_head_dim, index_topk
  return c;
}

/// The shrinking every test flavour shares: small vocabulary, hidden size and expert widths, and
/// 4 heads. Per-head dimensions (L, P, R, V) stay those of the real model.
void shrink_for_tests(ModelConfig& c, const char* name) {
  c.name = name;
  c.n_vocab = 512;
  c.context_length = 4096;
  c.n_embd = 256;
  c.n_ff = 384;
  c.n_ff_expert = 128;
  c.n_head = 4;
}

}  // namespace

std::span<const std::string_view> model_preset_names() noexcept { return kNames; }

ModelConfig model_preset(std::string_view name) {
  ModelConfig c;
  if (name == "test-v2-lite") {
    c = deepseek_v2_lite();
    shrink_for_tests(c, "test-v2-lite");
    c.n_layer = 3;  // 1 dense + 2 MoE
    c.n_expert = 8;
    c.n_expert_used = 2;
    c.n_expert_shared = 2;
  } else if (name == "test-v3") {
    c = deepseek_v3();
    shrink_for_tests(c, "test-v3");
    c.n_layer = 4;  // 1 dense + 2 MoE + 1 MTP block (skipped)
    c.n_nextn_layer = 1;
    c.n_dense_lead = 1;
    c.q_lora_rank = 192;
    c.n_expert = 16;
    c.n_expert_used = 4;
    c.n_expert_group = 4;
    c.n_expert_group_used = 2;
  } else if (name == "test-glm-dsa") {
    c = glm_5();
    shrink_for_tests(c, "test-glm-dsa");
    c.n_layer = 4;  // 1 dense + 2 MoE + 1 MTP block (skipped)
    c.n_dense_lead = 1;
    c.q_lora_rank = 256;
    c.n_expert = 8;
    c.n_expert_used = 2;
    c.indexer = {.n_head = 4, .head_dim = 128, .top_k = 16};
  } else if (name == "test-glm-flash") {
    c = glm_47_flash();
    shrink_for_tests(c, "test-glm-flash");
    c.n_layer = 3;  // 1 dense + 1 MoE + 1 MTP block (skipped)
    c.q_lora_rank = 192;
    c.n_expert = 8;
    c.n_expert_used = 2;
  } else if (name == "deepseek-v2-lite") {
    c = deepseek_v2_lite();
  } else if (name == "deepseek-v3") {
    c = deepseek_v3();
  } else if (name == "glm-4.7-flash") {
    c = glm_47_flash();
  } else if (name == "glm-5") {
    c = glm_5();
  } else {
    std::string list;
    for (auto n : kNames) list += (list.empty() ? "" : ", ") + std::string(n);
    throw Error(ErrorCode::not_found, "unknown model preset '" + std::string(name) + "' (available: " + list + ")");
  }
  return c;
}

void set_main_layer_count(ModelConfig& config, int n_main_layers) {
  if (n_main_layers < 1) {
    throw Error(ErrorCode::invalid_argument,
                "a model needs at least one layer (asked for " + std::to_string(n_main_layers) + ")");
  }
  config.n_layer = n_main_layers + config.n_nextn_layer;
  config.n_dense_lead = std::min(config.n_dense_lead, n_main_layers);
}

}  // namespace latte
