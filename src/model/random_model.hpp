// GGUF files with random weights for any ModelConfig: every tensor the architecture expects, with
// magnitudes that keep activations realistic (norm weights near 1, projections ~ 1/sqrt(fan_in),
// router weights that spread the gating). Deterministic for a seed, whatever the thread count.
//
//   latte::write_random_model(latte::model_preset("test-v3"), "tiny.gguf", {.seed = 7});
//   auto model = latte::Model::load("tiny.gguf");
#pragma once

#include <latte/model.hpp>
#include <latte/quant.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace latte {

/// Which tensors carry the attention up-projections W_UK / W_UV.
enum class KvBLayout {
  split,  ///< attn_k_b {P, L, N} + attn_v_b {L, V, N} (current llama.cpp converter)
  fused,  ///< legacy attn_kv_b {L, N(P+V)} only (older conversions)
  both,   ///< all three (the `standard` backend reads attn_kv_b, `mla` reads attn_k_b / attn_v_b)
};

/// Options of the random-model writer.
struct RandomModelOptions {
  uint64_t seed = 1;  ///< same seed, same weights
  KvBLayout kv_b_layout = KvBLayout::split;
  /// Element type of each tensor, from its name and shape (ne[0] innermost). Default: f32 for all.
  /// The type's block size must divide ne[0].
  std::function<GgmlType(std::string_view name, std::span<const uint64_t> ne)> tensor_type{};
  /// Called on each tensor's fp32 values before they are encoded (tests use it to corrupt a layout).
  std::function<void(std::string_view name, std::span<const uint64_t> ne, std::span<float> values)> transform{};
  /// Adds extra metadata (e.g. tokenizer keys) before the tensors are written.
  std::function<void(gguf::Writer& writer)> extra_metadata{};
  unsigned n_threads = 1;  ///< threads generating and encoding tensors
};

/// Writes a random model for `config` (validated first) to `path`.
void write_random_model(const ModelConfig& config, const std::string& path, const RandomModelOptions& options = {});

/// The same file as write_random_model, in memory (small models only).
std::vector<std::byte> random_model_bytes(const ModelConfig& config, const RandomModelOptions& options = {});

}  // namespace latte
