// Quantize-then-dequantize error bounds per type, on ggml's standard test signal 0.1 + 2 cos(i + c)
// (test-quantize-fns) and on Gaussian noise, with fresh random offsets; exactness on values already
// on a quantization grid; and the row helpers (dequantize_rows, dot_row) against per-value decoding.
#include <doctest/doctest.h>

#include <latte/quant.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

using latte::GgmlType;

namespace {

struct Bound {
  GgmlType type;
  double cosine;    // max relative RMS error ||x - x'|| / ||x|| on the cosine signal
  double gaussian;  // same on N(0, 1) noise
};

// A b-bit grid spanning a block's range r has step r / (2^b - 1) and RMS error step / sqrt(12); the
// bounds below are that estimate for each format's effective bits (scales included), with margin
// for the worst of 10 trials: e.g. Q4_0 on the cosine (r ~ 4.2 per block of 32, 16 levels) gives
// 0.28/sqrt(12)/1.42 ~ 0.057. f16 and bf16 round each value: at most 2^-11 and 2^-8 relative.
const Bound k_bounds[] = {
    {GgmlType::f16, 3.0e-4, 3.0e-4},
    {GgmlType::bf16, 2.5e-3, 2.5e-3},
    {GgmlType::q4_0, 0.065, 0.11},
    {GgmlType::q4_1, 0.065, 0.10},
    {GgmlType::q5_0, 0.034, 0.055},
    {GgmlType::q5_1, 0.032, 0.050},
    {GgmlType::q8_0, 0.0045, 0.0070},
    {GgmlType::q8_1, 0.0045, 0.0070},
    {GgmlType::q2_k, 0.26, 0.37},
    {GgmlType::q3_k, 0.14, 0.19},
    {GgmlType::q4_k, 0.055, 0.090},
    {GgmlType::q5_k, 0.030, 0.046},
    {GgmlType::q6_k, 0.015, 0.023},
    {GgmlType::q8_k, 0.0045, 0.0095},
    {GgmlType::mxfp4, 0.105, 0.145},
    // 16 non-uniform levels per 32 values: worst of 200 trials 0.056 / 0.078 (IQ4_NL), 0.057 / 0.079 (IQ4_XS)
    {GgmlType::iq4_nl, 0.065, 0.090},
    {GgmlType::iq4_xs, 0.065, 0.090},
};

struct Errors {
  double relative_rms;
  double ggml_metric;  // ggml's test-quantize-fns measure: sqrt(sum of squared errors) / n
};

Errors roundtrip_error(GgmlType type, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(latte::row_bytes(type, x.size()));
  std::vector<float> y(x.size());
  latte::quantize_row(type, x.data(), q.data(), n);
  latte::dequantize_row(type, q.data(), y.data(), n);
  double sum_error = 0;
  double sum_x = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    sum_error += d * d;
    sum_x += static_cast<double>(x[i]) * x[i];
  }
  return {std::sqrt(sum_error / sum_x), std::sqrt(sum_error) / static_cast<double>(n)};
}

}  // namespace

TEST_CASE("quantize then dequantize stays within each type's error bound") {
  std::random_device seed_source;
  const uint32_t seed = seed_source();
  CAPTURE(seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> offset(0.0f, 1000.0f);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  const int n = 32 * 128;  // ggml's test size
  for (const Bound& bound : k_bounds) {
    const std::string name(latte::type_traits(bound.type).name);
    CAPTURE(name);
    for (int trial = 0; trial < 10; ++trial) {
      std::vector<float> cosine(n), noise(n);
      const float c = offset(rng);
      for (int i = 0; i < n; ++i) {
        cosine[i] = 0.1f + 2.0f * std::cos(static_cast<float>(i) + c);
        noise[i] = gauss(rng);
      }
      const Errors on_cosine = roundtrip_error(bound.type, cosine);
      const Errors on_noise = roundtrip_error(bound.type, noise);
      CHECK(on_cosine.relative_rms <= bound.cosine);
      CHECK(on_noise.relative_rms <= bound.gaussian);
      // ggml's own acceptance thresholds for its reference quantizers on the cosine signal.
      const double ggml_threshold =
          bound.type == GgmlType::q2_k ? 0.0075 : (bound.type == GgmlType::q3_k ? 0.0040 : 0.002);
      CHECK(on_cosine.ggml_metric <= ggml_threshold);
    }
  }
}

TEST_CASE("q4_K on the cosine signal: RMS error per value under 0.002 x sqrt(n), ggml's Q4_K class bound") {
  // Pinned separately because Q4_K is the format most DeepSeek/GLM downloads use.
  std::random_device seed_source;
  const uint32_t seed = seed_source();
  CAPTURE(seed);
  std::mt19937 rng(seed);
  std::vector<float> x(4096);
  const float c = std::uniform_real_distribution<float>(0.0f, 1000.0f)(rng);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f + 2.0f * std::cos(static_cast<float>(i) + c);
  const Errors e = roundtrip_error(GgmlType::q4_k, x);
  CHECK(e.ggml_metric <= 0.002);
  CHECK(e.relative_rms <= 0.055);
}

TEST_CASE("values already on the quantization grid come back exactly") {
  std::random_device seed_source;
  const uint32_t seed = seed_source();
  CAPTURE(seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> level8(-127, 127), level4(-8, 7), level5(-16, 15);
  // Per block: d a power of two, levels at the grid, the extreme level present so the quantizer
  // picks exactly that d (Q8_0: |level| = 127 present; Q4_0 / Q5_0: level -8 / -16 present).
  const float d = std::ldexp(1.0f, std::uniform_int_distribution<int>(-10, 5)(rng));
  std::vector<float> q8(64), q4(64), q5(64);
  for (int i = 0; i < 64; ++i) {
    q8[i] = d * static_cast<float>(i % 32 == 3 ? 127 : level8(rng));
    q4[i] = -d * static_cast<float>(i % 32 == 9 ? -8 : level4(rng));
    q5[i] = -d * static_cast<float>(i % 32 == 30 ? -16 : level5(rng));
  }
  for (auto [type, x] : {std::pair{GgmlType::q8_0, q8}, std::pair{GgmlType::q4_0, q4}, std::pair{GgmlType::q5_0, q5}}) {
    const std::string name(latte::type_traits(type).name);
    CAPTURE(name);
    std::vector<uint8_t> bytes(latte::row_bytes(type, 64));
    std::vector<float> back(64);
    latte::quantize_row(type, x.data(), bytes.data(), 64);
    latte::dequantize_row(type, bytes.data(), back.data(), 64);
    CHECK(back == x);
  }
}

TEST_CASE("dequantize_rows equals row-by-row decoding and dot_row equals the dot of decoded values") {
  std::random_device seed_source;
  const uint32_t seed = seed_source();
  CAPTURE(seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (GgmlType type : {GgmlType::f32, GgmlType::f16, GgmlType::bf16, GgmlType::q8_0, GgmlType::q4_k, GgmlType::q6_k,
                        GgmlType::mxfp4}) {
    const std::string name(latte::type_traits(type).name);
    CAPTURE(name);
    const int64_t rows = 5;
    const int64_t cols = 2560;  // 10 K-quant blocks: exercises a partial dot_row chunk
    std::vector<float> x(static_cast<size_t>(rows * cols)), v(static_cast<size_t>(cols));
    for (auto& e : x) e = gauss(rng);
    for (auto& e : v) e = gauss(rng);
    const uint64_t row_size = latte::row_bytes(type, static_cast<uint64_t>(cols));
    std::vector<uint8_t> bytes(row_size * rows);
    latte::quantize_row(type, x.data(), bytes.data(), rows * cols);
    std::vector<float> all(x.size()), one(static_cast<size_t>(cols));
    latte::dequantize_rows(type, bytes.data(), all.data(), rows, cols);
    for (int64_t r = 0; r < rows; ++r) {
      latte::dequantize_row(type, bytes.data() + r * row_size, one.data(), cols);
      CHECK(std::equal(one.begin(), one.end(), all.begin() + r * cols));
      double exact = 0;
      double magnitude = 0;
      for (int64_t i = 0; i < cols; ++i) {
        exact += static_cast<double>(one[static_cast<size_t>(i)]) * v[static_cast<size_t>(i)];
        magnitude += std::fabs(static_cast<double>(one[static_cast<size_t>(i)]) * v[static_cast<size_t>(i)]);
      }
      const float dot = latte::dot_row(type, bytes.data() + r * row_size, v.data(), cols);
      // Float accumulation in 16 lanes of 160 terms, then 16 partial sums: each rounding costs at
      // most 2^-24 of the running magnitude, so the error is below (160 + 16) * 2^-24 * magnitude.
      CHECK(std::fabs(dot - exact) <= 176.0 * 0x1p-24 * magnitude);
    }
  }
}
