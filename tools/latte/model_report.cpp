#include "model_report.hpp"

#include <latte/error.hpp>
#include <latte/model.hpp>

#include <optional>
#include <string>

namespace latte::cli {

namespace {

struct Inspected {
  std::optional<ModelConfig> config;
  WeightAudit audit;
  std::string error;
};

Inspected inspect_model(const gguf::File& file) {
  Inspected r;
  try {
    r.config = ModelConfig::from_gguf(file);
    r.audit = audit_weights(file, *r.config);
  } catch (const Error& e) {
    r.error = e.what();
  }
  return r;
}

nlohmann::ordered_json config_json(const ModelConfig& c) {
  nlohmann::ordered_json j;
  j["architecture"] = std::string(architecture_name(c.arch));
  j["n_vocab"] = c.n_vocab;
  j["context_length"] = c.context_length;
  j["n_embd"] = c.n_embd;
  j["n_layer"] = c.n_layer;
  j["n_nextn_layer"] = c.n_nextn_layer;
  j["n_dense_lead"] = c.n_dense_lead;
  j["n_head"] = c.n_head;
  j["q_lora_rank"] = c.q_lora_rank;
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["qk_nope_head_dim"] = c.qk_nope_head_dim;
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["v_head_dim"] = c.v_head_dim;
  j["n_expert"] = c.n_expert;
  j["n_expert_used"] = c.n_expert_used;
  j["n_expert_shared"] = c.n_expert_shared;
  j["expert_groups"] = {c.n_expert_group, c.n_expert_group_used};
  j["expert_gating"] = c.expert_gating == ExpertGating::softmax ? "softmax" : "sigmoid";
  j["expert_weights_norm"] = c.expert_weights_norm;
  j["expert_weights_scale"] = c.expert_weights_scale;
  j["attention_scale"] = c.attention_scale();
  if (c.has_indexer())
    j["indexer"] = {{"n_head", c.indexer.n_head}, {"head_dim", c.indexer.head_dim}, {"top_k", c.indexer.top_k}};
  return j;
}

nlohmann::ordered_json entries_json(const std::vector<WeightAudit::Entry>& entries) {
  auto a = nlohmann::ordered_json::array();
  for (const auto& e : entries) a.push_back({{"tensor", e.tensor}, {"detail", e.detail}});
  return a;
}

}  // namespace

bool is_supported_model(const gguf::File& file) {
  const auto* arch = file.find("general.architecture");
  const auto* name = arch ? arch->get_if<std::string>() : nullptr;
  if (!name) return false;
  for (Architecture a : supported_architectures()) {
    if (architecture_name(a) == *name) return true;
  }
  return false;
}

bool print_model_text(std::ostream& out, const gguf::File& file, bool list_tensors) {
  const Inspected m = inspect_model(file);
  out << "\nmodel:\n";
  if (!m.config) {
    out << "  error: " << m.error << "\n";
    return false;
  }
  const ModelConfig& c = *m.config;
  out << "  " << architecture_name(c.arch) << ", " << c.n_layer_main() << " blocks (" << c.n_dense_lead << " dense, "
      << c.n_nextn_layer << " MTP skipped), hidden " << c.n_embd << ", vocabulary " << c.n_vocab << "\n"
      << "  attention: " << c.n_head << " heads, q_lora " << c.q_lora_rank << ", kv_lora " << c.kv_lora_rank
      << ", nope " << c.qk_nope_head_dim << ", rope " << c.qk_rope_head_dim << ", v " << c.v_head_dim << ", scale "
      << c.attention_scale() << "\n"
      << "  experts: " << c.n_expert << " routed (" << c.n_expert_used << " used, groups " << c.n_expert_group << "/"
      << c.n_expert_group_used << ", " << (c.expert_gating == ExpertGating::softmax ? "softmax" : "sigmoid")
      << (c.expert_weights_norm ? ", normalised" : "") << ", scale " << c.expert_weights_scale << ") + "
      << c.n_expert_shared << " shared\n";
  if (c.has_indexer()) {
    out << "  indexer: " << c.indexer.n_head << " heads x " << c.indexer.head_dim << ", top_k " << c.indexer.top_k
        << "\n";
  }
  out << "audit: " << m.audit.summary();
  if (list_tensors) {
    for (const auto& e : m.audit.mapped) out << "  mapped: " << e.tensor << " (" << e.detail << ")\n";
    for (const auto& e : m.audit.skipped) out << "  skipped: " << e.tensor << " (" << e.detail << ")\n";
  }
  return m.audit.ok();
}

nlohmann::ordered_json model_json(const gguf::File& file, bool list_tensors) {
  const Inspected m = inspect_model(file);
  nlohmann::ordered_json j;
  if (!m.config) {
    j["error"] = m.error;
    return j;
  }
  j["config"] = config_json(*m.config);
  nlohmann::ordered_json a;
  a["ok"] = m.audit.ok();
  a["mapped"] = list_tensors ? entries_json(m.audit.mapped) : nlohmann::ordered_json(m.audit.mapped.size());
  a["skipped"] = list_tensors ? entries_json(m.audit.skipped) : nlohmann::ordered_json(m.audit.skipped.size());
  a["missing"] = entries_json(m.audit.missing);
  a["wrong_shape"] = entries_json(m.audit.wrong_shape);
  a["bad_type"] = entries_json(m.audit.bad_type);
  a["unexpected"] = entries_json(m.audit.unexpected);
  j["audit"] = a;
  return j;
}

}  // namespace latte::cli
