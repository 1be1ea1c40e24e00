// A Hugging Face config.json (DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, Glm4MoeLiteForCausalLM,
// GlmMoeDsaForCausalLM) read as the ModelConfig the converted GGUF file will state, plus the facts
// about the checkpoint's layout that the converter needs (MTP blocks, tied embeddings, fp8 blocks).
//
//   latte::convert::HfModel hf = latte::convert::read_hf_config_file("DeepSeek-V3/config.json");
//   int blocks = hf.config.n_layer;   // trunk blocks, plus the MTP blocks when they are kept
#pragma once

#include "convert/source_matrix.hpp"

#include <latte/model.hpp>

#include <optional>
#include <string>

namespace latte::convert {

/// Options of read_hf_config.
struct HfConfigOptions {
  /// Keep the checkpoint's multi-token-prediction (nextn) blocks as trailing GGUF blocks. Default:
  /// what llama.cpp's converter does (kept for the GLM architectures, dropped for DeepSeek-V2/V3).
  std::optional<bool> keep_mtp;
  /// general.name of the output (informational).
  std::string name;
};

/// What config.json says about the model and its checkpoint.
struct HfModel {
  std::string hf_architecture;  ///< e.g. "DeepseekV3ForCausalLM"
  ModelConfig config;           ///< as the GGUF file states it (n_layer includes kept MTP blocks)
  int n_trunk_layers = 0;       ///< num_hidden_layers
  int n_checkpoint_mtp = 0;     ///< num_nextn_predict_layers: MTP blocks stored after the trunk
  bool tie_word_embeddings = false;
  bool fp8 = false;             ///< quantization_config.quant_method == "fp8"
  /// rope_interleave false: the checkpoint's q_pe / k_pe dims pair as (i, i + R/2) (transformers'
  /// rotate_half); the converter reorders those rows so that they pair as (2i, 2i + 1), the GGUF's RoPE.
  bool rope_half_split = false;
  BlockScaleShape fp8_block{};  ///< quantization_config.weight_block_size
};

/// Parses config.json text. `name` stands for the file in messages. Throws Error(unsupported)
/// naming an unknown architecture (and listing the supported ones) or a setting latte cannot
/// represent, and Error(invalid_file) naming the key for missing or mistyped values.
HfModel read_hf_config(const std::string& text, const std::string& name, const HfConfigOptions& options = {});

/// Reads and parses the file at `path` (Error(not_found) when it does not exist).
HfModel read_hf_config_file(const std::string& path, const HfConfigOptions& options = {});

}  // namespace latte::convert
