// RoPE: the interleaved pairing DeepSeek and GLM files use, and YaRN's frequencies and attention
// scale, against references computed here from the formulas.
#include "cpu/rope.hpp"
#include "model/presets.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <vector>

namespace {

std::vector<float> random_vector(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double distance(const std::vector<float>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s);
}

}  // namespace

TEST_CASE("RoPE rotates adjacent pairs (interleaved), not half-split (neox) pairs") {
  constexpr int R = 64;
  constexpr double base = 10000.0;
  const int position = 37;
  const auto x = random_vector(R, std::random_device{}());
  std::vector<double> interleaved(R), neox(R);
  for (int i = 0; i < R / 2; ++i) {
    const double theta = position * std::pow(base, -2.0 * i / R);
    const double c = std::cos(theta), s = std::sin(theta);
    interleaved[2 * i] = x[2 * i] * c - x[2 * i + 1] * s;
    interleaved[2 * i + 1] = x[2 * i] * s + x[2 * i + 1] * c;
    neox[i] = x[i] * c - x[i + R / 2] * s;
    neox[i + R / 2] = x[i] * s + x[i + R / 2] * c;
  }
  latte::cpu::RotaryEmbedding rope(R, static_cast<float>(base), {});
  std::vector<float> y = x;
  rope.rotate(y.data(), position);
  CHECK(distance(y, interleaved) < 1e-5);
  CHECK(distance(y, neox) > 0.1);  // the two pairings really differ on this vector
}

TEST_CASE("YaRN frequencies follow the correction-range ramp between extrapolation and interpolation") {
  // DeepSeek-V2/V3: base 10000, 64 rope dims, factor 40, original context 4096, beta 32 / 1.
  const latte::RopeScaling yarn{.type = latte::RopeScalingType::yarn,
                                .factor = 40.0f,
                                .original_context_length = 4096,
                                .yarn_beta_fast = 32.0f,
                                .yarn_beta_slow = 1.0f,
                                .yarn_log_multiplier = 0.1f};
  constexpr int R = 64;
  constexpr double base = 10000.0, factor = 40.0, original = 4096.0;
  const latte::cpu::RotaryEmbedding rope(R, static_cast<float>(base), yarn);
  REQUIRE(rope.inv_freq().size() == R / 2);

  // Correction dims: the pair index where a frequency turns n times over the original context.
  auto correction_dim = [&](double turns) {
    return R * std::log(original / (turns * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
  };
  const double low = std::floor(correction_dim(32.0)), high = std::ceil(correction_dim(1.0));
  CHECK(low == 10.0);   // worked out by hand: floor(10.47)
  CHECK(high == 23.0);  // ceil(22.51)
  for (int i = 0; i < R / 2; ++i) {
    const double extrapolated = std::pow(base, -2.0 * i / R);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double expected = extrapolated / factor * ramp + extrapolated * (1.0 - ramp);
    CAPTURE(i);
    CHECK(rope.inv_freq()[static_cast<size_t>(i)] == doctest::Approx(expected).epsilon(1e-12));
  }
  // High frequencies are untouched, low ones divided by the factor.
  CHECK(rope.inv_freq()[5] == doctest::Approx(std::pow(base, -10.0 / 64)).epsilon(1e-12));
  CHECK(rope.inv_freq()[30] == doctest::Approx(std::pow(base, -60.0 / 64) / 40.0).epsilon(1e-12));
}

TEST_CASE("linear RoPE scaling divides every frequency by the factor") {
  const latte::cpu::RotaryEmbedding plain(64, 10000.0f, {});
  const latte::cpu::RotaryEmbedding linear(64, 10000.0f, {.type = latte::RopeScalingType::linear, .factor = 4.0f});
  for (size_t i = 0; i < 32; ++i) CHECK(linear.inv_freq()[i] == doctest::Approx(plain.inv_freq()[i] / 4.0));
}

TEST_CASE("the attention scale is mscale^2 / sqrt(P + R) with mscale = 1 + yarn_log_multiplier * ln(factor)") {
  const latte::ModelConfig v3 = latte::model_preset("deepseek-v3");
  const double mscale = 1.0 + 0.1 * std::log(40.0);  // mscale_all_dim 1.0
  CHECK(v3.attention_scale() == doctest::Approx(mscale * mscale / std::sqrt(192.0)).epsilon(1e-6));
  CHECK(v3.attention_scale() != doctest::Approx(1.0 / std::sqrt(576.0)));

  const latte::ModelConfig v2 = latte::model_preset("deepseek-v2-lite");
  const double m2 = 1.0 + 0.0707 * std::log(40.0);  // 0.1 * mscale_all_dim 0.707
  CHECK(v2.attention_scale() == doctest::Approx(m2 * m2 / std::sqrt(192.0)).epsilon(1e-6));

  const latte::ModelConfig glm = latte::model_preset("glm-5");  // no scaling, P + R = 256
  CHECK(glm.attention_scale() == doctest::Approx(1.0 / 16.0).epsilon(1e-7));
}
