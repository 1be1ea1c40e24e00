// Named model configurations: small "test-*" flavours with the real per-head dimensions (for tests
// and `latte convert --random`) and the real shapes of released models (layers overridable).
//
//   latte::ModelConfig cfg = latte::model_preset("test-v3");
//   cfg.n_layer = 5; cfg.validate();
#pragma once

#include <latte/model.hpp>

#include <span>
#include <string_view>

namespace latte {

/// Names of every preset, in a stable order:
///   test-v2-lite  deepseek2, no q_lora, softmax gating, YaRN, 1 dense + 2 MoE blocks
///   test-v3       deepseek2, q_lora, sigmoid gating + exp_probs_b bias, groups 4/2, norm, scale 2.5
///   test-glm-dsa  glm-dsa, indexer with top_k 16, P 192, V 256, sigmoid gating
///   test-glm-flash  deepseek2 with GLM-4.7-Flash's head dims (P 192, V 256), an MTP block
///   deepseek-v2-lite, deepseek-v3, glm-4.7-flash, glm-5: the released models' config.json values
std::span<const std::string_view> model_preset_names() noexcept;

/// The preset named `name`. Throws Error(not_found) listing the available names.
ModelConfig model_preset(std::string_view name);

/// Sets the number of inference blocks (keeping the MTP blocks and clamping the dense lead) of a
/// preset, e.g. to build a 2-block file with a real model's widths.
void set_main_layer_count(ModelConfig& config, int n_main_layers);

}  // namespace latte
