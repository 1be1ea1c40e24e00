// The transformers oracle fixtures (tests/data/oracle): an HF checkpoint's config mapped onto a
// ModelConfig and its tensors onto GGUF names (independently of latte's converter, both K/V layouts
// written, bf16), for the CPU and CUDA oracle tests.
//
//   auto config = latte::test::config_from_hf(latte::test::read_json(dir + "/config.json"));
//   auto bytes = latte::test::gguf_from_checkpoint(dir, config);
#pragma once

#include <latte/model.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace latte::test {

/// The ModelConfig of an HF config.json (deepseek_v2, deepseek_v3, glm4_moe_lite, glm_moe_dsa).
ModelConfig config_from_hf(const nlohmann::json& hf);
/// GGUF bytes (bf16 tensors) of the checkpoint in `dir`: both K/V layouts, experts stacked.
std::vector<std::byte> gguf_from_checkpoint(const std::string& dir, const ModelConfig& config);
/// Parses a JSON file (fails the test when it cannot be read).
nlohmann::json read_json(const std::string& path);

}  // namespace latte::test
