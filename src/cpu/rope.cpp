#include "cpu/rope.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace latte::cpu {

namespace {

/// The pair index at which a frequency completes `n_rotations` turns over `original_context`
/// positions (YaRN's correction dimension, fractional).
double yarn_correction_dim(int n_dims, double base, double original_context, double n_rotations) {
  return n_dims * std::log(original_context / (n_rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(int n_dims, float freq_base, const RopeScaling& scaling) {
  if (n_dims <= 0 || n_dims % 2 != 0) {
    throw Error(ErrorCode::invalid_argument,
                "rope needs a positive even number of dims (got " + std::to_string(n_dims) + ")");
  }
  const int n_pairs = n_dims / 2;
  const double base = freq_base;
  inv_freq_.resize(static_cast<size_t>(n_pairs));
  for (int i = 0; i < n_pairs; ++i) inv_freq_[static_cast<size_t>(i)] = std::pow(base, -2.0 * i / n_dims);

  if (scaling.type == RopeScalingType::linear) {
    for (double& f : inv_freq_) f /= scaling.factor;
  } else if (scaling.type == RopeScalingType::yarn && scaling.factor != 1.0f) {
    // Pairs below `low` keep the original (extrapolated) frequency, pairs above `high` take the
    // interpolated one (divided by factor), with a linear ramp in between.
    const double orig = scaling.original_context_length;
    const double low = std::max(0.0, std::floor(yarn_correction_dim(n_dims, base, orig, scaling.yarn_beta_fast)));
    const double high =
        std::min(n_dims - 1.0, std::ceil(yarn_correction_dim(n_dims, base, orig, scaling.yarn_beta_slow)));
    const double span = std::max(0.001, high - low);
    for (int i = 0; i < n_pairs; ++i) {
      const double ramp = std::clamp((i - low) / span, 0.0, 1.0);
      const double extrapolation_weight = 1.0 - ramp;
      const double extrapolated = inv_freq_[static_cast<size_t>(i)];
      const double interpolated = extrapolated / scaling.factor;
      inv_freq_[static_cast<size_t>(i)] =
          interpolated * (1.0 - extrapolation_weight) + extrapolated * extrapolation_weight;
    }
  }
}

void RotaryEmbedding::angles(int position, float* cos_out, float* sin_out) const {
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const double theta = position * inv_freq_[i];
    cos_out[i] = static_cast<float>(std::cos(theta));
    sin_out[i] = static_cast<float>(std::sin(theta));
  }
}

void RotaryEmbedding::rotate_pairs(float* x, const float* cos_v, const float* sin_v, int n_pairs) noexcept {
  for (int i = 0; i < n_pairs; ++i) {
    const float a = x[2 * i];
    const float b = x[2 * i + 1];
    x[2 * i] = a * cos_v[i] - b * sin_v[i];
    x[2 * i + 1] = a * sin_v[i] + b * cos_v[i];
  }
}

void RotaryEmbedding::rotate(float* x, int position) const {
  std::vector<float> c(inv_freq_.size()), s(inv_freq_.size());
  angles(position, c.data(), s.data());
  rotate_pairs(x, c.data(), s.data(), static_cast<int>(inv_freq_.size()));
}

}  // namespace latte::cpu
