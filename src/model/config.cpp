// ModelConfig: reading and writing the `{arch}.` GGUF keys, defaults as llama.cpp's loader applies
// them, and the consistency checks.
#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/model.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace latte {

namespace {

constexpr std::array<Architecture, 2> kArchitectures{Architecture::deepseek2, Architecture::glm_dsa};

// GLM-4.7-Flash files converted before expert_gating_func was written: llama.cpp recognises them by
// block count and vocabulary and uses sigmoid gating for them.
constexpr int kGlmFlashVocab = 154880;

/// Typed access to one architecture's metadata keys, with errors naming the file and the key.
class MetadataReader {
 public:
  MetadataReader(const gguf::File& file, std::string prefix) : file_(file), prefix_(std::move(prefix)) {}

  [[nodiscard]] std::string key(std::string_view suffix) const { return prefix_ + std::string(suffix); }

  [[nodiscard]] bool has(std::string_view suffix) const { return file_.find(key(suffix)) != nullptr; }

  /// An integer key, or nullopt when absent. Arrays (per-layer values) must hold one repeated value.
  [[nodiscard]] std::optional<int64_t> optional_int(std::string_view suffix) const {
    const std::string k = key(suffix);
    const gguf::Value* v = file_.find(k);
    if (!v) return std::nullopt;
    if (const auto* arr = v->get_if<gguf::Array>()) return uniform_array_int(k, *arr);
    auto i = v->as_int();
    if (!i) fail(k, "has type " + std::string(gguf::value_type_name(v->type())) + ", expected an integer");
    return *i;
  }

  [[nodiscard]] int required_int(std::string_view suffix) const {
    auto v = optional_int(suffix);
    if (!v) fail(key(suffix), "is missing (required for " + prefix_.substr(0, prefix_.size() - 1) + " models)");
    return to_int(key(suffix), *v);
  }

  [[nodiscard]] int int_or(std::string_view suffix, int fallback) const {
    auto v = optional_int(suffix);
    return v ? to_int(key(suffix), *v) : fallback;
  }

  [[nodiscard]] std::optional<float> optional_float(std::string_view suffix) const {
    const std::string k = key(suffix);
    const gguf::Value* v = file_.find(k);
    if (!v) return std::nullopt;
    auto d = v->as_number();
    if (!d) fail(k, "has type " + std::string(gguf::value_type_name(v->type())) + ", expected a number");
    if (!std::isfinite(*d)) fail(k, "is not finite");
    return static_cast<float>(*d);
  }

  [[nodiscard]] float required_float(std::string_view suffix) const {
    auto v = optional_float(suffix);
    if (!v) fail(key(suffix), "is missing (required for " + prefix_.substr(0, prefix_.size() - 1) + " models)");
    return *v;
  }

  [[nodiscard]] float float_or(std::string_view suffix, float fallback) const {
    return optional_float(suffix).value_or(fallback);
  }

  [[nodiscard]] bool bool_or(std::string_view suffix, bool fallback) const {
    const std::string k = key(suffix);
    const gguf::Value* v = file_.find(k);
    if (!v) return fallback;
    if (const bool* b = v->get_if<bool>()) return *b;
    if (auto i = v->as_int()) return *i != 0;
    fail(k, "has type " + std::string(gguf::value_type_name(v->type())) + ", expected a bool");
  }

  [[nodiscard]] std::optional<std::string> optional_string(std::string_view suffix) const {
    const std::string k = key(suffix);
    const gguf::Value* v = file_.find(k);
    if (!v) return std::nullopt;
    const auto* s = v->get_if<std::string>();
    if (!s) fail(k, "has type " + std::string(gguf::value_type_name(v->type())) + ", expected a string");
    return *s;
  }

  [[noreturn]] void fail(const std::string& full_key, const std::string& what) const {
    throw Error(ErrorCode::invalid_file, file_.path() + ": key '" + full_key + "' " + what);
  }

 private:
  int to_int(const std::string& k, int64_t v) const {
    if (v < 0 || v > std::numeric_limits<int32_t>::max()) fail(k, "has out-of-range value " + std::to_string(v));
    return static_cast<int>(v);
  }

  int64_t uniform_array_int(const std::string& k, const gguf::Array& arr) const {
    std::optional<int64_t> first;
    for (size_t i = 0; i < arr.size(); ++i) {
      int64_t value = 0;
      bool ok = std::visit(
          [&](const auto& vec) {
            using T = typename std::decay_t<decltype(vec)>::value_type;
            if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
              value = static_cast<int64_t>(vec[i]);
              return true;
            } else {
              return false;
            }
          },
          arr.values);
      if (!ok) fail(k, "is an array of non-integers");
      if (first && *first != value) fail(k, "varies per layer, which latte does not support");
      first = value;
    }
    if (!first) fail(k, "is an empty array");
    return *first;
  }

  const gguf::File& file_;
  std::string prefix_;
};

RopeScalingType parse_rope_scaling(const MetadataReader& md, const std::string& name) {
  if (name == "none" || name.empty()) return RopeScalingType::none;
  if (name == "linear") return RopeScalingType::linear;
  if (name == "yarn") return RopeScalingType::yarn;
  md.fail(md.key("rope.scaling.type"), "has unsupported value '" + name + "' (supported: none, linear, yarn)");
}

std::string_view rope_scaling_name(RopeScalingType t) {
  switch (t) {
    case RopeScalingType::none:
      return "none";
    case RopeScalingType::linear:
      return "linear";
    case RopeScalingType::yarn:
      return "yarn";
  }
  return "none";
}

}  // namespace

std::string_view architecture_name(Architecture arch) noexcept {
  switch (arch) {
    case Architecture::deepseek2:
      return "deepseek2";
    case Architecture::glm_dsa:
      return "glm-dsa";
  }
  return "unknown";
}

std::span<const Architecture> supported_architectures() noexcept { return kArchitectures; }

Architecture parse_architecture(std::string_view name) {
  std::string list;
  for (Architecture a : kArchitectures) {
    if (architecture_name(a) == name) return a;
    list += (list.empty() ? "" : ", ") + std::string(architecture_name(a));
  }
  throw Error(ErrorCode::unsupported, "unsupported architecture '" + std::string(name) + "' (supported: " + list + ")");
}

ModelConfig ModelConfig::from_gguf(const gguf::File& file) {
  const gguf::Value* arch_value = file.find("general.architecture");
  if (!arch_value) {
    throw Error(ErrorCode::invalid_file, file.path() + ": key 'general.architecture' is missing");
  }
  const auto* arch_name = arch_value->get_if<std::string>();
  if (!arch_name) {
    throw Error(ErrorCode::invalid_file, file.path() + ": key 'general.architecture' is not a string");
  }
  ModelConfig c;
  c.arch = parse_architecture(*arch_name);
  const MetadataReader md(file, *arch_name + ".");
  if (const gguf::Value* n = file.find("general.name")) {
    if (const auto* s = n->get_if<std::string>()) c.name = *s;
  }

  c.context_length = md.required_int("context_length");
  c.n_embd = md.required_int("embedding_length");
  c.n_layer = md.required_int("block_count");
  c.n_nextn_layer = md.int_or("nextn_predict_layers", 0);
  c.n_dense_lead = md.int_or("leading_dense_block_count", 0);
  c.n_ff = md.int_or("feed_forward_length", 0);
  c.n_ff_expert = md.required_int("expert_feed_forward_length");
  c.n_expert = md.required_int("expert_count");
  c.n_expert_used = md.required_int("expert_used_count");
  c.n_expert_shared = md.int_or("expert_shared_count", 0);
  c.n_expert_group = md.int_or("expert_group_count", 1);
  c.n_expert_group_used = md.int_or("expert_group_used_count", 1);
  if (c.n_expert_group == 0) c.n_expert_group = 1;  // llama.cpp treats 0 as "no groups"
  if (c.n_expert_group_used == 0) c.n_expert_group_used = 1;
  c.expert_weights_scale = md.float_or("expert_weights_scale", 1.0f);
  if (c.expert_weights_scale == 0.0f) c.expert_weights_scale = 1.0f;  // llama.cpp: 0 means "unset"
  c.expert_weights_norm = md.bool_or("expert_weights_norm", false);

  c.n_head = md.required_int("attention.head_count");
  c.q_lora_rank = md.int_or("attention.q_lora_rank", 0);
  c.kv_lora_rank = md.required_int("attention.kv_lora_rank");
  c.qk_rope_head_dim = md.required_int("rope.dimension_count");
  c.rms_norm_eps = md.required_float("attention.layer_norm_rms_epsilon");
  c.rope_freq_base = md.float_or("rope.freq_base", 10000.0f);

  // Head widths: MLA files (split k_b / v_b) store the decompressed widths under *_mla and the
  // latent widths (L+R, L) under key_length / value_length; older files store P+R and V directly.
  int qk_head = 0;
  if (md.has("attention.key_length_mla") || md.has("attention.value_length_mla")) {
    qk_head = md.required_int("attention.key_length_mla");
    c.v_head_dim = md.required_int("attention.value_length_mla");
    if (auto kl = md.optional_int("attention.key_length");
        kl && *kl != c.kv_lora_rank + c.qk_rope_head_dim && *kl != qk_head) {
      md.fail(md.key("attention.key_length"), "is " + std::to_string(*kl) +
                                                  ", expected kv_lora_rank + rope.dimension_count = " +
                                                  std::to_string(c.kv_lora_rank + c.qk_rope_head_dim));
    }
  } else {
    qk_head = md.required_int("attention.key_length");
    c.v_head_dim = md.required_int("attention.value_length");
  }
  if (qk_head <= c.qk_rope_head_dim) {
    md.fail(md.key(md.has("attention.key_length_mla") ? "attention.key_length_mla" : "attention.key_length"),
            "is " + std::to_string(qk_head) + ", not larger than rope.dimension_count " +
                std::to_string(c.qk_rope_head_dim));
  }
  c.qk_nope_head_dim = qk_head - c.qk_rope_head_dim;
  if (auto kv_heads = md.optional_int("attention.head_count_kv"); kv_heads && *kv_heads != 1 && *kv_heads != c.n_head) {
    md.fail(md.key("attention.head_count_kv"),
            "is " + std::to_string(*kv_heads) + ", expected 1 (MLA) or " + std::to_string(c.n_head) + " (head_count)");
  }

  // Expert gating: absent in DeepSeek-V2 / V2.5 files (softmax) and in GLM-5 files (sigmoid).
  if (auto g = md.optional_int("expert_gating_func"); g && *g != 0) {
    if (*g != 1 && *g != 2) {
      md.fail(md.key("expert_gating_func"), "has unsupported value " + std::to_string(*g) + " (1 softmax, 2 sigmoid)");
    }
    c.expert_gating = static_cast<ExpertGating>(*g);
  } else {
    c.expert_gating = c.arch == Architecture::glm_dsa ? ExpertGating::sigmoid : ExpertGating::softmax;
  }

  // Vocabulary: the embedding's rows, else {arch}.vocab_size, else the tokenizer's token list.
  if (const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight"); embd && embd->n_dims >= 2) {
    if (embd->ne[1] > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      throw Error(ErrorCode::invalid_file, file.path() + ": tensor 'token_embd.weight' has too many rows");
    }
    c.n_vocab = static_cast<int>(embd->ne[1]);
  } else if (md.has("vocab_size")) {
    c.n_vocab = md.required_int("vocab_size");
  } else if (file.find("tokenizer.ggml.tokens")) {
    c.n_vocab = static_cast<int>(file.get_strings("tokenizer.ggml.tokens").size());
  } else {
    throw Error(ErrorCode::invalid_file, file.path() + ": cannot tell the vocabulary size (no token_embd.weight, no '" +
                                             md.key("vocab_size") + "', no tokenizer.ggml.tokens)");
  }
  if (c.arch == Architecture::deepseek2 && !md.has("expert_gating_func") && c.n_vocab == kGlmFlashVocab &&
      (c.n_layer == 47 || c.n_layer == 48)) {
    c.expert_gating = ExpertGating::sigmoid;  // GLM-4.7-Flash converted without the key
  }

  // RoPE scaling: type, then factor (rope.scaling.factor, or the older rope.scale_linear).
  if (auto type = md.optional_string("rope.scaling.type")) c.rope_scaling.type = parse_rope_scaling(md, *type);
  if (auto f = md.optional_float("rope.scaling.factor")) {
    c.rope_scaling.factor = *f;
  } else if (auto lin = md.optional_float("rope.scale_linear")) {
    c.rope_scaling.factor = *lin;
  }
  if (c.rope_scaling.factor == 0.0f) c.rope_scaling.factor = 1.0f;
  c.rope_scaling.original_context_length = static_cast<uint32_t>(md.int_or("rope.scaling.original_context_length", 0));
  if (c.rope_scaling.original_context_length == 0 && c.rope_scaling.type != RopeScalingType::none) {
    c.rope_scaling.original_context_length = static_cast<uint32_t>(c.context_length);
  }
  c.rope_scaling.yarn_beta_fast = md.float_or("rope.scaling.yarn_beta_fast", 32.0f);
  c.rope_scaling.yarn_beta_slow = md.float_or("rope.scaling.yarn_beta_slow", 1.0f);
  c.rope_scaling.yarn_log_multiplier = md.float_or("rope.scaling.yarn_log_multiplier", 0.0f);

  if (c.arch == Architecture::glm_dsa) {
    c.indexer.n_head = md.required_int("attention.indexer.head_count");
    c.indexer.head_dim = md.required_int("attention.indexer.key_length");
    c.indexer.top_k = md.required_int("attention.indexer.top_k");
    c.indexer.norm_eps = md.float_or("attention.layer_norm_epsilon", 1e-6f);
  }

  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(ErrorCode::invalid_file, file.path() + ": " + e.what());
  }
  return c;
}

void ModelConfig::write_gguf_metadata(gguf::Writer& w, KvMetadata kv) const {
  const std::string arch_name(architecture_name(arch));
  const std::string p = arch_name + ".";
  auto u32 = [](int v) { return static_cast<uint32_t>(v); };
  w.set("general.architecture", arch_name);
  if (!name.empty()) w.set("general.name", name);
  w.set(p + "vocab_size", u32(n_vocab));
  w.set(p + "context_length", u32(context_length));
  w.set(p + "embedding_length", u32(n_embd));
  w.set(p + "block_count", u32(n_layer));
  if (n_nextn_layer > 0) w.set(p + "nextn_predict_layers", u32(n_nextn_layer));
  w.set(p + "feed_forward_length", u32(n_ff));
  w.set(p + "leading_dense_block_count", u32(n_dense_lead));
  w.set(p + "expert_feed_forward_length", u32(n_ff_expert));
  w.set(p + "expert_count", u32(n_expert));
  w.set(p + "expert_used_count", u32(n_expert_used));
  w.set(p + "expert_shared_count", u32(n_expert_shared));
  w.set(p + "expert_group_count", u32(n_expert_group));
  w.set(p + "expert_group_used_count", u32(n_expert_group_used));
  w.set(p + "expert_weights_scale", expert_weights_scale);
  w.set(p + "expert_weights_norm", expert_weights_norm);
  w.set(p + "expert_gating_func", static_cast<uint32_t>(expert_gating));
  w.set(p + "attention.head_count", u32(n_head));
  if (kv == KvMetadata::mla) {
    w.set(p + "attention.head_count_kv", uint32_t{1});
    w.set(p + "attention.key_length", u32(kv_lora_rank + qk_rope_head_dim));
    w.set(p + "attention.value_length", u32(kv_lora_rank));
    w.set(p + "attention.key_length_mla", u32(qk_head_dim()));
    w.set(p + "attention.value_length_mla", u32(v_head_dim));
  } else {
    w.set(p + "attention.head_count_kv", u32(n_head));
    w.set(p + "attention.key_length", u32(qk_head_dim()));
    w.set(p + "attention.value_length", u32(v_head_dim));
  }
  if (q_lora_rank > 0) w.set(p + "attention.q_lora_rank", u32(q_lora_rank));
  w.set(p + "attention.kv_lora_rank", u32(kv_lora_rank));
  w.set(p + "attention.layer_norm_rms_epsilon", rms_norm_eps);
  w.set(p + "rope.dimension_count", u32(qk_rope_head_dim));
  w.set(p + "rope.freq_base", rope_freq_base);
  if (rope_scaling.type != RopeScalingType::none) {
    w.set(p + "rope.scaling.type", std::string(rope_scaling_name(rope_scaling.type)));
    w.set(p + "rope.scaling.factor", rope_scaling.factor);
    w.set(p + "rope.scaling.original_context_length", rope_scaling.original_context_length);
    if (rope_scaling.type == RopeScalingType::yarn) {
      w.set(p + "rope.scaling.yarn_beta_fast", rope_scaling.yarn_beta_fast);
      w.set(p + "rope.scaling.yarn_beta_slow", rope_scaling.yarn_beta_slow);
      w.set(p + "rope.scaling.yarn_log_multiplier", rope_scaling.yarn_log_multiplier);
    }
  }
  if (has_indexer()) {
    w.set(p + "attention.indexer.head_count", u32(indexer.n_head));
    w.set(p + "attention.indexer.key_length", u32(indexer.head_dim));
    w.set(p + "attention.indexer.top_k", u32(indexer.top_k));
    if (indexer.norm_eps != 1e-6f) w.set(p + "attention.layer_norm_epsilon", indexer.norm_eps);
  }
}

void ModelConfig::validate() const {
  std::vector<std::string> problems;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) problems.push_back(what);
  };
  auto positive = [&](int v, const char* what) {
    check(v > 0, std::string(what) + " must be positive (is " + std::to_string(v) + ")");
  };
  positive(n_vocab, "n_vocab");
  positive(context_length, "context_length");
  positive(n_embd, "embedding_length");
  positive(n_layer, "block_count");
  positive(n_head, "attention.head_count");
  positive(kv_lora_rank, "attention.kv_lora_rank");
  positive(qk_nope_head_dim, "qk_nope_head_dim (key_length_mla - rope.dimension_count)");
  positive(qk_rope_head_dim, "rope.dimension_count");
  positive(v_head_dim, "v_head_dim (value_length_mla)");
  check(q_lora_rank >= 0, "attention.q_lora_rank must not be negative");
  check(qk_rope_head_dim % 2 == 0, "rope.dimension_count must be even (is " + std::to_string(qk_rope_head_dim) + ")");
  check(n_nextn_layer >= 0 && n_nextn_layer < n_layer, "nextn_predict_layers (" + std::to_string(n_nextn_layer) +
                                                           ") must be below block_count (" + std::to_string(n_layer) +
                                                           ")");
  check(n_dense_lead >= 0 && n_dense_lead <= n_layer_main(), "leading_dense_block_count (" +
                                                                 std::to_string(n_dense_lead) + ") exceeds the " +
                                                                 std::to_string(n_layer_main()) + " inference blocks");
  if (n_dense_lead > 0) positive(n_ff, "feed_forward_length");
  const bool has_moe = n_dense_lead < n_layer;
  if (has_moe) {
    positive(n_expert, "expert_count");
    positive(n_ff_expert, "expert_feed_forward_length");
    check(n_expert_used > 0 && n_expert_used <= n_expert, "expert_used_count (" + std::to_string(n_expert_used) +
                                                              ") must be in 1..expert_count (" +
                                                              std::to_string(n_expert) + ")");
    check(n_expert_shared >= 0, "expert_shared_count must not be negative");
    check(n_expert_group >= 1 && n_expert > 0 && n_expert % n_expert_group == 0,
          "expert_group_count (" + std::to_string(n_expert_group) + ") must divide expert_count (" +
              std::to_string(n_expert) + ")");
    check(n_expert_group_used >= 1 && n_expert_group_used <= n_expert_group,
          "expert_group_used_count (" + std::to_string(n_expert_group_used) + ") must be in 1..expert_group_count (" +
              std::to_string(n_expert_group) + ")");
    if (n_expert_group >= 1 && n_expert % n_expert_group == 0 && n_expert > 0) {
      // 64-bit: the group counts are only range-checked above (each check reports, none stops), and a hostile
      // file's expert_group_used_count may be far above expert_group_count
      const int64_t kept = int64_t{n_expert_group_used} * (n_expert / n_expert_group);
      check(n_expert_used <= kept, "expert_used_count (" + std::to_string(n_expert_used) + ") exceeds the " +
                                       std::to_string(kept) + " experts of the kept groups");
    }
    check(std::isfinite(expert_weights_scale) && expert_weights_scale > 0.0f,
          "expert_weights_scale must be positive and finite");
    check(expert_gating == ExpertGating::softmax || expert_gating == ExpertGating::sigmoid,
          "expert_gating_func must be 1 (softmax) or 2 (sigmoid)");
  }
  check(std::isfinite(rms_norm_eps) && rms_norm_eps > 0.0f, "attention.layer_norm_rms_epsilon must be positive");
  check(std::isfinite(rope_freq_base) && rope_freq_base > 1.0f, "rope.freq_base must be larger than 1");
  if (rope_scaling.type != RopeScalingType::none) {
    check(std::isfinite(rope_scaling.factor) && rope_scaling.factor > 0.0f, "rope.scaling.factor must be positive");
  }
  if (rope_scaling.type == RopeScalingType::yarn) {
    check(rope_scaling.original_context_length > 0, "rope.scaling.original_context_length must be positive for YaRN");
    check(std::isfinite(rope_scaling.yarn_beta_fast) && std::isfinite(rope_scaling.yarn_beta_slow) &&
              rope_scaling.yarn_beta_fast > 0.0f && rope_scaling.yarn_beta_slow > 0.0f,
          "rope.scaling.yarn_beta_fast / yarn_beta_slow must be positive");
    check(std::isfinite(rope_scaling.yarn_log_multiplier), "rope.scaling.yarn_log_multiplier must be finite");
  }
  if (arch == Architecture::glm_dsa) {
    positive(indexer.n_head, "attention.indexer.head_count");
    positive(indexer.top_k, "attention.indexer.top_k");
    check(indexer.head_dim >= qk_rope_head_dim && indexer.head_dim % 2 == 0,
          "attention.indexer.key_length (" + std::to_string(indexer.head_dim) +
              ") must be even and at least rope.dimension_count (" + std::to_string(qk_rope_head_dim) + ")");
    check(q_lora_rank > 0, "attention.q_lora_rank must be positive for glm-dsa (the indexer reads q_a)");
    check(std::isfinite(indexer.norm_eps) && indexer.norm_eps > 0.0f, "the indexer LayerNorm epsilon must be positive");
  } else {
    check(!has_indexer(), std::string(architecture_name(arch)) + " models have no indexer");
  }
  if (problems.empty()) return;
  std::string msg = "inconsistent model config (" + std::to_string(problems.size()) + " problem" +
                    (problems.size() == 1 ? "" : "s") + "):";
  for (const auto& p : problems) msg += "\n  " + p;
  throw Error(ErrorCode::invalid_file, msg);
}

}  // namespace latte
