// ModelConfig's attention scale (DESIGN.md): 1/sqrt(P + R), times mscale^2 under YaRN. Its own file so
// that code needing only the scale (the CUDA emulation's fused-step tests) links nothing else.
#include <latte/model.hpp>

#include <cmath>

namespace latte {

float ModelConfig::yarn_mscale() const noexcept {
  if (rope_scaling.type != RopeScalingType::yarn || rope_scaling.factor <= 1.0f) return 1.0f;
  return 1.0f + rope_scaling.yarn_log_multiplier * std::log(rope_scaling.factor);
}

float ModelConfig::attention_scale() const noexcept {
  const float m = yarn_mscale();
  return m * m / std::sqrt(static_cast<float>(qk_head_dim()));
}

}  // namespace latte
