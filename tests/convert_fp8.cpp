// fp8 decoding (E4M3 "fn" and E5M2) against the formats' definitions, and DeepSeek-style 128x128
// block-scale dequantization (w = fp8 * scale_inv[row / 128][col / 128]).
#include "convert/fp8.hpp"
#include "convert/safetensors.hpp"
#include "convert/source_matrix.hpp"
#include "support/safetensors_writer.hpp"

#include <latte/error.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>

namespace {

// The E4M3 "fn" definition: bias 7, 3 mantissa bits, S.1111.111 is NaN, no infinities.
double e4m3_reference(int bits) {
  const int sign = bits >> 7, exponent = (bits >> 3) & 15, mantissa = bits & 7;
  if (exponent == 15 && mantissa == 7) return std::nan("");
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa / 8.0, 1 - 7) : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

// E5M2: bias 15, 2 mantissa bits, exponent 31 holds infinities (mantissa 0) and NaNs.
double e5m2_reference(int bits) {
  const int sign = bits >> 7, exponent = (bits >> 2) & 31, mantissa = bits & 3;
  double magnitude;
  if (exponent == 31) {
    magnitude = mantissa == 0 ? INFINITY : std::nan("");
  } else {
    magnitude = exponent == 0 ? std::ldexp(mantissa / 4.0, 1 - 15) : std::ldexp(1.0 + mantissa / 4.0, exponent - 15);
  }
  return sign ? -magnitude : magnitude;
}

}  // namespace

TEST_CASE("fp8 e4m3 decodes all 256 bit patterns as the format defines them") {
  for (int bits = 0; bits < 256; ++bits) {
    const double want = e4m3_reference(bits);
    const float got = latte::convert::fp8_e4m3_to_float(static_cast<uint8_t>(bits));
    CAPTURE(bits);
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
    } else {
      CHECK(static_cast<double>(got) == want);
      CHECK(std::signbit(got) == ((bits & 0x80) != 0));
    }
  }
  // Hand-computed landmarks.
  CHECK(latte::convert::fp8_e4m3_to_float(0x38) == 1.0f);
  CHECK(latte::convert::fp8_e4m3_to_float(0xB8) == -1.0f);
  CHECK(latte::convert::fp8_e4m3_to_float(0x7E) == 448.0f);        // the largest finite value
  CHECK(latte::convert::fp8_e4m3_to_float(0x08) == 0.015625f);     // smallest normal, 2^-6
  CHECK(latte::convert::fp8_e4m3_to_float(0x01) == 0.001953125f);  // smallest subnormal, 2^-9
  CHECK(latte::convert::fp8_e4m3_to_float(0x07) == 0.013671875f);  // 7 * 2^-9
  CHECK(latte::convert::fp8_e4m3_to_float(0x4B) == 5.5f);          // 0.1001.011 = 1.375 * 2^2
  CHECK(std::isnan(latte::convert::fp8_e4m3_to_float(0x7F)));
  CHECK(std::isnan(latte::convert::fp8_e4m3_to_float(0xFF)));
  CHECK(latte::convert::fp8_e4m3_to_float(0x78) == 256.0f);  // exponent 15 is a normal binade
}

TEST_CASE("fp8 e5m2 decodes all 256 bit patterns as the format defines them") {
  for (int bits = 0; bits < 256; ++bits) {
    const double want = e5m2_reference(bits);
    const float got = latte::convert::fp8_e5m2_to_float(static_cast<uint8_t>(bits));
    CAPTURE(bits);
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
    } else {
      CHECK(static_cast<double>(got) == want);
    }
  }
  CHECK(latte::convert::fp8_e5m2_to_float(0x3C) == 1.0f);
  CHECK(latte::convert::fp8_e5m2_to_float(0x7B) == 57344.0f);
  CHECK(std::isinf(latte::convert::fp8_e5m2_to_float(0x7C)));
}

TEST_CASE("fp8 block-scaled weights dequantize as w * scale_inv[row / block][col / block]") {
  using latte::convert::BlockScaleShape;
  using latte::convert::SourceMatrix;
  SUBCASE("hand-built 3x5 weight with 2x2 blocks") {
    // Weight bits (rows of 5): 1.0, 2.0, -0.5, 448, 0 / ... ; scales [[0.5, 3, -2], [10, 1, 0.25]].
    const uint8_t w_bits[15] = {0x38, 0x40, 0xB0, 0x7E, 0x00,   // 1, 2, -0.5, 448, 0
                                0x30, 0xC0, 0x3C, 0x01, 0x44,   // 0.5, -2, 1.5, 2^-9, 3
                                0x48, 0x38, 0x34, 0xB8, 0x40};  // 4, 1, 0.75, -1, 2
    std::vector<std::byte> w(15);
    for (int i = 0; i < 15; ++i) w[static_cast<size_t>(i)] = static_cast<std::byte>(w_bits[i]);
    const std::vector<float> scales{0.5f, 3.0f, -2.0f, 10.0f, 1.0f, 0.25f};
    latte::test::SafetensorsWriter writer;
    writer.add_raw("w", "F8_E4M3", {3, 5}, w);
    writer.add_f32("w_scale_inv", {2, 3}, scales);
    const auto file = latte::safetensors::File::from_bytes(writer.image(), "fp8.safetensors");
    const SourceMatrix m(*file.find("w"), file.find("w_scale_inv"), BlockScaleShape{2, 2});
    std::vector<float> got(15);
    m.decode_rows(0, 3, got.data());
    const float want[15] = {0.5f,  1.0f,  -1.5f, 1344.0f,      -0.0f,  // row 0: scales .5 .5 3 3 -2
                            0.25f, -1.0f, 4.5f,  0.005859375f, -6.0f,
                            40.0f, 10.0f, 0.75f, -1.0f,        0.5f};  // row 2: scales 10 10 1 1 .25
    for (int i = 0; i < 15; ++i) CHECK(got[static_cast<size_t>(i)] == want[i]);
    float span[3];
    m.decode_span(1, 2, 3, span);
    CHECK(span[0] == 4.5f);
    CHECK(span[2] == -6.0f);
  }
  SUBCASE("130x260 weight with the 128x128 blocks of DeepSeek-V3 (partial edge blocks)") {
    std::mt19937 rng(std::random_device{}());
    const uint64_t rows = 130, cols = 260;
    std::vector<std::byte> w(rows * cols);
    for (auto& b : w) {
      uint8_t bits;
      do bits = static_cast<uint8_t>(rng());
      while ((bits & 0x7F) == 0x7F);  // no NaNs
      b = static_cast<std::byte>(bits);
    }
    std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
    std::vector<float> scales(2 * 3);
    for (auto& s : scales) s = dist(rng);
    latte::test::SafetensorsWriter writer;
    writer.add_raw("w", "F8_E4M3", {rows, cols}, w);
    writer.add_f32("s", {2, 3}, scales);
    const auto file = latte::safetensors::File::from_bytes(writer.image(), "fp8.safetensors");
    const SourceMatrix m(*file.find("w"), file.find("s"));
    std::vector<float> got(rows * cols);
    m.decode_rows(0, rows, got.data());
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t c = 0; c < cols; ++c) {
        const float want =
            static_cast<float>(e4m3_reference(static_cast<int>(w[r * cols + c]))) * scales[(r / 128) * 3 + c / 128];
        REQUIRE(got[r * cols + c] == want);
      }
    }
  }
  SUBCASE("a scale tensor of the wrong shape is rejected naming both tensors") {
    latte::test::SafetensorsWriter writer;
    writer.add_raw("w", "F8_E4M3", {130, 260}, std::vector<std::byte>(130 * 260));
    writer.add_f32("s", {1, 3}, std::vector<float>(3, 1.0f));
    const auto file = latte::safetensors::File::from_bytes(writer.image(), "fp8.safetensors");
    try {
      const SourceMatrix m(*file.find("w"), file.find("s"));
      FAIL("accepted a [1, 3] scale for a 130x260 weight");
    } catch (const latte::Error& e) {
      CHECK(e.code() == latte::ErrorCode::invalid_file);
      const std::string what = e.what();
      CHECK(what.find("'s'") != std::string::npos);
      CHECK(what.find("'w'") != std::string::npos);
      CHECK(what.find("[2, 3]") != std::string::npos);
    }
  }
}

TEST_CASE("source matrices reject integer tensors") {
  latte::test::SafetensorsWriter writer;
  writer.add_raw("ids", "I32", {4}, std::vector<std::byte>(16));
  const auto file = latte::safetensors::File::from_bytes(writer.image(), "ints.safetensors");
  CHECK_THROWS_AS(latte::convert::SourceMatrix(*file.find("ids")), latte::Error);
}
