// Expected tensors of a config, the audit of a file against them, and the role-named views.
#include "model/weights.hpp"

#include "model/architecture.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/quant.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace latte::detail {

/// The block index of a "blk.N." tensor name, or -1.
static int block_of(std::string_view name) {
  constexpr std::string_view prefix = "blk.";
  if (name.substr(0, prefix.size()) != prefix) return -1;
  size_t i = prefix.size();
  int n = 0;
  bool any = false;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') {
    n = n * 10 + (name[i] - '0');
    if (n > 1'000'000) return -1;
    ++i;
    any = true;
  }
  if (!any || i >= name.size() || name[i] != '.') return -1;
  return n;
}

static std::vector<uint64_t> shape_of(const gguf::TensorInfo& t) {
  std::vector<uint64_t> ne(t.ne.begin(), t.ne.begin() + std::max<uint32_t>(t.n_dims, 1));
  while (ne.size() > 1 && ne.back() == 1) ne.pop_back();
  return ne;
}

static std::vector<uint64_t> trimmed(std::vector<uint64_t> ne) {
  while (ne.size() > 1 && ne.back() == 1) ne.pop_back();
  return ne;
}

static TensorView view_of(const gguf::File& file, const gguf::TensorInfo& t) {
  TensorView v;
  v.name = t.name;
  v.type = t.type;
  for (size_t d = 0; d < 4; ++d) v.ne[d] = static_cast<int64_t>(t.ne[d]);
  v.data = file.tensor_data(t).data();
  v.row_bytes = static_cast<size_t>(row_bytes(t.type, t.ne[0]));
  return v;
}

std::string shape_text(std::span<const uint64_t> ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

std::vector<TensorSpec> expected_tensors(const ModelConfig& c) {
  const auto H = static_cast<uint64_t>(c.n_embd);
  const auto V = static_cast<uint64_t>(c.n_vocab);
  std::vector<TensorSpec> specs;
  specs.push_back(
      {.name = "token_embd.weight", .ne = {H, V}, .global_slot = &ModelWeights::token_embd, .role = "token embedding"});
  specs.push_back(
      {.name = "output_norm.weight", .ne = {H}, .global_slot = &ModelWeights::output_norm, .role = "final RMSNorm"});
  specs.push_back({.name = "output.weight",
                   .ne = {H, V},
                   .need = TensorNeed::optional,
                   .global_slot = &ModelWeights::output,
                   .role = "output head (token_embd when absent)"});
  const ArchitectureOps& ops = architecture_ops(c.arch);
  for (int il = 0; il < c.n_layer; ++il) ops.add_block_tensors(c, il, specs);
  for (auto& s : specs) s.ne = trimmed(s.ne);
  return specs;
}

ModelWeights map_weights(const gguf::File& file, const ModelConfig& config, const WeightAudit& audit) {
  if (!audit.ok()) {
    throw Error(ErrorCode::invalid_file, file.path() + ": the tensors do not fit the " +
                                             std::string(architecture_name(config.arch)) + " config:\n" +
                                             audit.problems());
  }
  ModelWeights w;
  w.layers.resize(static_cast<size_t>(config.n_layer_main()));
  for (const TensorSpec& s : expected_tensors(config)) {
    if (s.mtp) continue;
    const gguf::TensorInfo* t = file.find_tensor(s.name);
    if (!t) continue;
    const TensorView v = view_of(file, *t);
    if (s.global_slot) w.*s.global_slot = v;
    if (s.layer_slot && s.layer >= 0 && s.layer < config.n_layer_main()) {
      w.layers[static_cast<size_t>(s.layer)].*s.layer_slot = v;
    }
  }
  if (!w.output) w.output = w.token_embd;  // tied embeddings
  return w;
}

std::vector<AttentionLayerWeights> ModelWeights::attention_weights() const {
  std::vector<AttentionLayerWeights> out;
  out.reserve(layers.size());
  for (size_t il = 0; il < layers.size(); ++il) {
    out.push_back({.layer = static_cast<int>(il),
                   .k_b = layers[il].attn_k_b,
                   .v_b = layers[il].attn_v_b,
                   .kv_b = layers[il].attn_kv_b});
  }
  return out;
}

}  // namespace latte::detail

namespace latte {

using detail::TensorSpec;

WeightAudit audit_weights(const gguf::File& file, const ModelConfig& config) {
  WeightAudit audit;
  // Every block has tensors of its own (attn_norm at least), so a block count above the file's tensor
  // count cannot be satisfied. Say so in one entry instead of listing (and allocating) the tensors of
  // up to 2^31 blocks that a hostile block_count would ask for.
  if (static_cast<uint64_t>(config.n_layer) > file.tensors().size()) {
    audit.missing.push_back({"blk.*", "block_count " + std::to_string(config.n_layer) +
                                          " needs tensors for every block; the file has only " +
                                          std::to_string(file.tensors().size()) + " tensors"});
    return audit;
  }
  const std::vector<TensorSpec> specs = detail::expected_tensors(config);
  std::map<std::string, const detail::TensorSpec*, std::less<>> by_name;
  for (const auto& s : specs) by_name.emplace(s.name, &s);

  std::set<std::string, std::less<>> present;
  for (const gguf::TensorInfo& t : file.tensors()) {
    present.insert(t.name);
    const auto it = by_name.find(t.name);
    const int block = detail::block_of(t.name);
    const bool in_mtp_block = block >= config.n_layer_main() && block < config.n_layer;
    if (it == by_name.end()) {
      if (in_mtp_block) {
        audit.skipped.push_back({t.name, "MTP block " + std::to_string(block)});
      } else {
        audit.unexpected.push_back({t.name, "not part of " + std::string(architecture_name(config.arch)) + " (shape " +
                                                t.shape_string() + ")"});
      }
      continue;
    }
    const detail::TensorSpec& spec = *it->second;
    if (spec.mtp) {
      audit.skipped.push_back({t.name, "MTP block " + std::to_string(spec.layer)});
      continue;
    }
    const auto shape = detail::shape_of(t);
    if (shape != spec.ne) {
      audit.wrong_shape.push_back({t.name, "shape " + detail::shape_text(shape) + ", expected " +
                                               detail::shape_text(spec.ne) + " (" + spec.role + ")"});
      continue;
    }
    const auto traits = find_type_traits(static_cast<uint32_t>(t.type));
    if (!traits || !traits->dequantizable) {
      audit.bad_type.push_back({t.name, "element type " + std::to_string(static_cast<uint32_t>(t.type)) +
                                            (traits ? " (" + std::string(traits->name) + ")" : "") +
                                            " cannot be computed with"});
      continue;
    }
    audit.mapped.push_back({t.name, spec.role});
  }

  // Required tensors, and either/or groups (one option complete).
  std::map<std::string, std::map<int, std::vector<const detail::TensorSpec*>>> groups;
  for (const auto& s : specs) {
    if (s.mtp) continue;
    if (s.need == detail::TensorNeed::required && !present.contains(s.name)) {
      audit.missing.push_back({s.name, s.role + ", shape " + detail::shape_text(s.ne)});
    } else if (s.need == detail::TensorNeed::either) {
      groups[s.group][s.option].push_back(&s);
    }
  }
  for (const auto& [group, options] : groups) {
    bool complete = false;
    for (const auto& [option, members] : options) {
      complete = complete || std::all_of(members.begin(), members.end(),
                                         [&](const detail::TensorSpec* m) { return present.contains(m->name); });
    }
    if (complete) continue;
    std::string alternatives;
    for (const auto& [option, members] : options) {
      std::string names;
      for (const detail::TensorSpec* m : members) names += (names.empty() ? "" : " + ") + m->name;
      alternatives += (alternatives.empty() ? "" : " or ") + names;
    }
    audit.missing.push_back({group, "needs " + alternatives});
  }
  return audit;
}

std::string WeightAudit::problems() const {
  std::string s;
  auto list = [&](const std::vector<Entry>& entries, const char* label) {
    for (const auto& e : entries) s += std::string(label) + ": " + e.tensor + " (" + e.detail + ")\n";
  };
  list(missing, "missing");
  list(wrong_shape, "wrong shape");
  list(bad_type, "unusable type");
  list(unexpected, "unexpected");
  return s;
}

std::string WeightAudit::summary() const {
  std::string s = std::to_string(mapped.size()) + " tensors mapped, " + std::to_string(skipped.size()) +
                  " skipped (MTP), " + std::to_string(missing.size()) + " missing, " +
                  std::to_string(wrong_shape.size()) + " mis-shaped, " + std::to_string(bad_type.size()) +
                  " of unusable type, " + std::to_string(unexpected.size()) + " unexpected\n";
  return s + problems();
}

}  // namespace latte
