#include "convert/hf_config.hpp"

#include <latte/error.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>

namespace latte::convert {
namespace {

using nlohmann::json;

struct KnownArchitecture {
  std::string_view hf_name;
  Architecture arch;
  bool keeps_mtp;          // llama.cpp's converter writes the nextn blocks
  bool sigmoid_gating;     // gating when config.json has no scoring_func
  int default_dense_lead;  // transformers' default when the config names no dense blocks
  // transformers' class reads rope_interleave (true: pairs (2i, 2i+1), false: rotate_half); the
  // others have no such setting (their configs do not write it), so a false one there is not guessed at
  bool rope_interleave;
};
constexpr KnownArchitecture known_architectures[] = {
    {"DeepseekV2ForCausalLM", Architecture::deepseek2, false, false, 0, false},
    {"DeepseekV3ForCausalLM", Architecture::deepseek2, false, true, 0, true},
    {"Glm4MoeLiteForCausalLM", Architecture::deepseek2, true, true, 1, true},
    {"GlmMoeDsaForCausalLM", Architecture::glm_dsa, true, true, 3, false},
};

// Typed access to config.json's keys with messages naming the file and the key.
class ConfigReader {
 public:
  ConfigReader(const json& root, std::string name) : root_(root), name_(std::move(name)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw Error(ErrorCode::invalid_file, name_ + ": \"" + key + "\" " + what);
  }
  [[noreturn]] void unsupported(const std::string& key, const std::string& what) const {
    throw Error(ErrorCode::unsupported, name_ + ": \"" + key + "\" " + what);
  }

  // nullptr when absent or null.
  [[nodiscard]] const json* find(const json& object, const std::string& key) const {
    const auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  [[nodiscard]] const json* find(const std::string& key) const { return find(root_, key); }

  [[nodiscard]] int to_int(const json& v, const std::string& key) const {
    if (!v.is_number_integer()) fail(key, "is " + v.dump() + ", not an integer");
    const auto i = v.get<int64_t>();
    if (i < 0 || i > std::numeric_limits<int32_t>::max()) fail(key, "is out of range: " + v.dump());
    return static_cast<int>(i);
  }
  [[nodiscard]] int required_int(const std::string& key) const {
    const json* v = find(key);
    if (!v) fail(key, "is missing");
    return to_int(*v, key);
  }
  [[nodiscard]] int int_or(const std::string& key, int fallback) const {
    const json* v = find(key);
    return v ? to_int(*v, key) : fallback;
  }
  [[nodiscard]] float to_float(const json& v, const std::string& key) const {
    if (!v.is_number()) fail(key, "is " + v.dump() + ", not a number");
    const double d = v.get<double>();
    if (!std::isfinite(d)) fail(key, "is not finite");
    return static_cast<float>(d);
  }
  [[nodiscard]] float float_or(const std::string& key, float fallback) const {
    const json* v = find(key);
    return v ? to_float(*v, key) : fallback;
  }
  [[nodiscard]] bool bool_or(const std::string& key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(key, "is " + v->dump() + ", not true or false");
    return v->get<bool>();
  }
  [[nodiscard]] std::optional<std::string> string_opt(const json& object, const std::string& key) const {
    const json* v = find(object, key);
    if (!v) return std::nullopt;
    if (!v->is_string()) fail(key, "is " + v->dump() + ", not a string");
    return v->get<std::string>();
  }

 private:
  const json& root_;
  std::string name_;
};

const KnownArchitecture& find_architecture(const ConfigReader& in, const json& root) {
  const json* list = in.find("architectures");
  if (!list) in.fail("architectures", "is missing");
  if (!list->is_array() || list->empty() || !(*list)[0].is_string()) {
    in.fail("architectures", "is " + list->dump() + ", not a list of names");
  }
  const std::string hf_name = (*list)[0].get<std::string>();
  for (const auto& a : known_architectures) {
    if (a.hf_name == hf_name) return a;
  }
  std::string supported;
  for (const auto& a : known_architectures) supported += (supported.empty() ? "" : ", ") + std::string(a.hf_name);
  (void)root;
  in.unsupported("architectures", "names " + hf_name + ", which latte cannot convert (supported: " + supported + ")");
}

void read_rope(const ConfigReader& in, const json& root, ModelConfig& c) {
  // transformers 5 stores everything under rope_parameters; older configs use rope_theta and
  // rope_scaling (with "type" or "rope_type").
  const json* rope = in.find("rope_parameters");
  const char* rope_key = "rope_parameters";
  if (!rope) {
    rope = in.find("rope_scaling");
    rope_key = "rope_scaling";
  }
  if (rope && !rope->is_object()) in.fail(rope_key, "is " + rope->dump() + ", not an object");
  c.rope_freq_base = in.float_or("rope_theta", 10000.0f);
  if (!rope) return;
  const std::string prefix = std::string(rope_key) + ".";
  if (const json* theta = in.find(*rope, "rope_theta")) c.rope_freq_base = in.to_float(*theta, prefix + "rope_theta");
  auto type = in.string_opt(*rope, "rope_type");
  if (!type) type = in.string_opt(*rope, "type");
  const float partial = [&] {
    const json* p = in.find(*rope, "partial_rotary_factor");
    if (!p) p = in.find(root, "partial_rotary_factor");
    return p ? in.to_float(*p, "partial_rotary_factor") : 1.0f;
  }();
  if (partial != 1.0f)
    in.unsupported("partial_rotary_factor", "is " + std::to_string(partial) + "; only 1 is supported");
  if (!type || *type == "default") return;
  const json* factor = in.find(*rope, "factor");
  if (*type == "linear") {
    if (!factor) in.fail(prefix + "factor", "is missing for linear scaling");
    c.rope_scaling.type = RopeScalingType::linear;
    c.rope_scaling.factor = in.to_float(*factor, prefix + "factor");
    return;
  }
  if (*type != "yarn") in.unsupported(prefix + "type", "is \"" + *type + "\" (supported: default, linear, yarn)");
  if (!factor) in.fail(prefix + "factor", "is missing for YaRN");
  c.rope_scaling.type = RopeScalingType::yarn;
  c.rope_scaling.factor = in.to_float(*factor, prefix + "factor");
  const json* original = in.find(*rope, "original_max_position_embeddings");
  if (!original) in.fail(prefix + "original_max_position_embeddings", "is missing for YaRN");
  c.rope_scaling.original_context_length =
      static_cast<uint32_t>(in.to_int(*original, prefix + "original_max_position_embeddings"));
  if (const json* v = in.find(*rope, "beta_fast"))
    c.rope_scaling.yarn_beta_fast = in.to_float(*v, prefix + "beta_fast");
  if (const json* v = in.find(*rope, "beta_slow"))
    c.rope_scaling.yarn_beta_slow = in.to_float(*v, prefix + "beta_slow");
  // llama.cpp's converter stores 0.1 * mscale_all_dim (DeepSeek's attention-scale correction).
  if (const json* v = in.find(*rope, "mscale_all_dim")) {
    c.rope_scaling.yarn_log_multiplier = 0.1f * in.to_float(*v, prefix + "mscale_all_dim");
  }
}

// Settings that change what the checkpoint computes in ways a GGUF of deepseek2 / glm-dsa cannot state:
// refused by name rather than converted into a file that loads and computes another model.
void read_unsupported_settings(const ConfigReader& in, const json& root, const KnownArchitecture& known) {
  if (const auto act = in.string_opt(root, "hidden_act"); act && *act != "silu") {
    in.unsupported("hidden_act", "is \"" + *act + "\"; latte's FFNs are SiLU-gated (\"silu\")");
  }
  if (in.bool_or("attention_bias", false)) {
    in.unsupported("attention_bias", "is true; latte's attention projections have no biases");
  }
  if (known.arch != Architecture::glm_dsa) return;
  // The indexer's RoPE: GLM-5 pairs (2i, 2i + 1) as the attention does; the half-split pairing
  // (DeepSeek-V3.2's default) is not what latte's indexer computes.
  if (!in.bool_or("indexer_rope_interleave", true)) {
    in.unsupported("indexer_rope_interleave", "is false; latte's indexer RoPE pairs (2i, 2i + 1)");
  }
  // Blocks that reuse an earlier block's top-k selection instead of running their own indexer.
  if (const json* types = in.find("indexer_types")) {
    if (!types->is_array()) in.fail("indexer_types", "is " + types->dump() + ", not a list of names");
    for (size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      if (!t.is_string()) in.fail("indexer_types", "entry " + std::to_string(i) + " is " + t.dump() + ", not a name");
      if (t != "full") {
        in.unsupported("indexer_types", "entry " + std::to_string(i) + " is " + t.dump() +
                                            "; latte runs every block's own indexer (\"full\")");
      }
    }
  }
  if (in.bool_or("use_index_cache", false)) {
    if (const int freq = in.int_or("index_topk_freq", 1); freq != 1) {
      in.unsupported("index_topk_freq",
                     "is " + std::to_string(freq) + " with use_index_cache; latte runs every block's own indexer");
    }
    // "F" computes a block's own selection, "S" reuses the previous one: a string or a list of them
    if (const json* pattern = in.find("index_topk_pattern")) {
      bool shares = false;
      if (pattern->is_string()) {
        shares = pattern->get<std::string>().find('S') != std::string::npos;
      } else if (pattern->is_array()) {
        for (const json& p : *pattern) shares = shares || p == "S";
      } else {
        in.fail("index_topk_pattern", "is " + pattern->dump() + ", not a string or a list");
      }
      if (shares) {
        in.unsupported("index_topk_pattern",
                       "is " + pattern->dump() + " with use_index_cache; latte runs every block's own indexer");
      }
    }
  }
}

}  // namespace

HfModel read_hf_config(const std::string& text, const std::string& name, const HfConfigOptions& options) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::invalid_file, name + ": not valid JSON (" + e.what() + ")");
  }
  if (!root.is_object()) throw Error(ErrorCode::invalid_file, name + ": not a JSON object");
  const ConfigReader in(root, name);
  const KnownArchitecture& known = find_architecture(in, root);

  HfModel hf;
  hf.hf_architecture = std::string(known.hf_name);
  ModelConfig& c = hf.config;
  c.arch = known.arch;
  c.name = options.name;
  c.n_vocab = in.required_int("vocab_size");
  c.context_length = in.required_int("max_position_embeddings");
  c.n_embd = in.required_int("hidden_size");
  hf.n_trunk_layers = in.required_int("num_hidden_layers");
  hf.n_checkpoint_mtp = in.int_or("num_nextn_predict_layers", 0);
  const bool keep_mtp = options.keep_mtp.value_or(known.keeps_mtp) && hf.n_checkpoint_mtp > 0;
  c.n_nextn_layer = keep_mtp ? hf.n_checkpoint_mtp : 0;
  c.n_layer = hf.n_trunk_layers + c.n_nextn_layer;
  c.n_ff = in.required_int("intermediate_size");

  // Mixture of experts.
  c.n_expert = in.required_int("n_routed_experts");
  c.n_ff_expert = in.required_int("moe_intermediate_size");
  c.n_expert_used = in.required_int("num_experts_per_tok");
  c.n_expert_shared = in.int_or("n_shared_experts", 0);
  c.n_expert_group = in.int_or("n_group", 1);
  c.n_expert_group_used = in.int_or("topk_group", 1);
  c.expert_weights_scale = in.float_or("routed_scaling_factor", 1.0f);
  c.expert_weights_norm = in.bool_or("norm_topk_prob", false);
  // Dense blocks first: mlp_layer_types (transformers 5) wins over first_k_dense_replace; without
  // either, transformers' defaults (DeepSeek: none, GLM-4.7-Flash: 1, GLM-5: 3).
  c.n_dense_lead = in.int_or("first_k_dense_replace", known.default_dense_lead);
  if (const json* types = in.find("mlp_layer_types")) {
    if (!types->is_array() || types->size() != static_cast<size_t>(hf.n_trunk_layers)) {
      in.fail("mlp_layer_types", "is not a list of num_hidden_layers names");
    }
    c.n_dense_lead = 0;
    for (size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      if (!t.is_string() || (t != "dense" && t != "sparse")) {
        in.fail("mlp_layer_types", "entry " + std::to_string(i) + " is " + t.dump() + ", not \"dense\" or \"sparse\"");
      }
      if (t == "dense") {
        if (c.n_dense_lead != static_cast<int>(i)) {
          in.unsupported("mlp_layer_types", "has a dense block after a sparse one; latte supports dense blocks first");
        }
        ++c.n_dense_lead;
      }
    }
  }
  if (const int freq = in.int_or("moe_layer_freq", 1); freq != 1) {
    in.unsupported("moe_layer_freq",
                   "is " + std::to_string(freq) + "; only 1 (every block after the dense lead) is supported");
  }
  const auto scoring = in.string_opt(root, "scoring_func");
  const auto topk_method = in.string_opt(root, "topk_method");
  if (scoring == "softmax") {
    c.expert_gating = ExpertGating::softmax;
  } else if (scoring == "sigmoid") {
    c.expert_gating = ExpertGating::sigmoid;
  } else if (scoring) {
    in.unsupported("scoring_func", "is \"" + *scoring + "\" (supported: softmax, sigmoid)");
  } else {
    c.expert_gating = known.sigmoid_gating || topk_method == "noaux_tc" ? ExpertGating::sigmoid : ExpertGating::softmax;
  }

  // Multi-head latent attention.
  c.n_head = in.required_int("num_attention_heads");
  c.q_lora_rank = in.int_or("q_lora_rank", 0);
  c.kv_lora_rank = in.required_int("kv_lora_rank");
  c.qk_nope_head_dim = in.required_int("qk_nope_head_dim");
  c.qk_rope_head_dim = in.required_int("qk_rope_head_dim");
  c.v_head_dim = in.required_int("v_head_dim");
  c.rms_norm_eps = in.float_or("rms_norm_eps", 1e-6f);
  read_rope(in, root, c);
  if (!in.bool_or("rope_interleave", true)) {
    if (!known.rope_interleave) {
      in.unsupported("rope_interleave", "is false, which transformers' " + std::string(known.hf_name) +
                                            " does not read; latte's RoPE pairs (2i, 2i + 1)");
    }
    hf.rope_half_split = true;
  }
  read_unsupported_settings(in, root, known);

  if (c.arch == Architecture::glm_dsa) {
    c.indexer.n_head = in.required_int("index_n_heads");
    c.indexer.head_dim = in.required_int("index_head_dim");
    c.indexer.top_k = in.required_int("index_topk");
  }

  hf.tie_word_embeddings = in.bool_or("tie_word_embeddings", false);
  if (const json* q = in.find("quantization_config")) {
    if (!q->is_object()) in.fail("quantization_config", "is not an object");
    const auto method = in.string_opt(*q, "quant_method");
    if (method != "fp8") {
      in.unsupported("quantization_config.quant_method",
                     "is \"" + method.value_or("") + "\"; only fp8 block-scaled checkpoints are supported");
    }
    hf.fp8 = true;
    if (const json* block = in.find(*q, "weight_block_size")) {
      if (!block->is_array() || block->size() != 2) {
        in.fail("quantization_config.weight_block_size", "is " + block->dump() + ", not [rows, cols]");
      }
      hf.fp8_block.rows = static_cast<uint64_t>(in.to_int((*block)[0], "quantization_config.weight_block_size"));
      hf.fp8_block.cols = static_cast<uint64_t>(in.to_int((*block)[1], "quantization_config.weight_block_size"));
    }
  }
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(e.code(), name + ": inconsistent model configuration: " + e.what());
  }
  return hf;
}

HfModel read_hf_config_file(const std::string& path, const HfConfigOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::not_found, path + ": cannot open (a Hugging Face model folder needs config.json)");
  std::ostringstream text;
  text << in.rdbuf();
  return read_hf_config(text.str(), path, options);
}

}  // namespace latte::convert
