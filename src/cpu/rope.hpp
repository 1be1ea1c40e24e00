// Rotary position embedding over the R rope dims, with the interleaved pairing DeepSeek and GLM
// GGUF files use: adjacent pairs (x[2i], x[2i+1]) rotate by position * inv_freq[i]. Linear and YaRN
// frequency scaling as ggml's rope_yarn and HF's DeepseekV2 YaRN rotary embedding define them;
// cos/sin are not scaled (YaRN's magnitude correction lives in ModelConfig::attention_scale()).
//
//   latte::cpu::RotaryEmbedding rope(64, 10000.0f, config.rope_scaling);
//   rope.rotate(q_pe, position);
#pragma once

#include <latte/model.hpp>

#include <span>
#include <vector>

namespace latte::cpu {

/// Per-pair frequencies and the rotation of interleaved pairs.
class RotaryEmbedding {
 public:
  /// `n_dims` rope dims (even), base frequency, scaling. Throws Error(invalid_argument) for odd dims.
  RotaryEmbedding(int n_dims, float freq_base, const RopeScaling& scaling);
  /// The rope embedding of a model (R dims, its base and scaling).
  explicit RotaryEmbedding(const ModelConfig& config)
      : RotaryEmbedding(config.qk_rope_head_dim, config.rope_freq_base, config.rope_scaling) {}

  [[nodiscard]] int n_dims() const noexcept { return static_cast<int>(inv_freq_.size()) * 2; }
  /// inv_freq[i] (radians per position) of pair i, after scaling.
  [[nodiscard]] std::span<const double> inv_freq() const noexcept { return inv_freq_; }

  /// cos and sin of position * inv_freq[i] for every pair (each n_dims / 2 floats).
  void angles(int position, float* cos_out, float* sin_out) const;
  /// Rotates the interleaved pairs of x[0, n_dims) with precomputed angles.
  static void rotate_pairs(float* x, const float* cos_v, const float* sin_v, int n_pairs) noexcept;
  /// angles() + rotate_pairs() for one vector.
  void rotate(float* x, int position) const;

 private:
  std::vector<double> inv_freq_;
};

}  // namespace latte::cpu
