// fp16 and bf16 conversions: exact widening, round-to-nearest-even narrowing with ggml's handling of
// NaN, infinity, overflow and subnormals. The reference rounds in double precision with
// std::nearbyint, independently of the bit manipulation under test; where the compiler offers
// _Float16 its conversion is a second oracle.
#include <doctest/doctest.h>

#include <latte/quant.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

namespace {

// Rounds |a| (finite, >= 0) to a binary format with `mantissa_bits` stored bits, minimum normal
// exponent `min_exponent` and largest finite exponent `max_exponent`, returning the encoding without
// sign; `exponent_bias` places the exponent field. Infinity encodes as all-ones exponent.
uint32_t reference_round(double a, int mantissa_bits, int exponent_bias, int min_exponent, int max_exponent) {
  const uint32_t inf = static_cast<uint32_t>((2 * exponent_bias + 1)) << mantissa_bits;
  if (a == 0.0) return 0;
  int e2;
  (void)std::frexp(a, &e2);  // a = f * 2^e2, f in [0.5, 1)
  int exponent = e2 - 1;     // a in [2^exponent, 2^(exponent+1))
  if (exponent < min_exponent) {
    // Subnormal: integer multiples of 2^(min_exponent - mantissa_bits).
    const double units = std::nearbyint(std::ldexp(a, mantissa_bits - min_exponent));
    return static_cast<uint32_t>(units);  // may reach 2^mantissa_bits: the smallest normal, same encoding
  }
  double mantissa = std::nearbyint(std::ldexp(a, mantissa_bits - exponent));  // in [2^m, 2^(m+1)]
  if (mantissa == std::ldexp(1.0, mantissa_bits + 1)) {
    mantissa /= 2;
    ++exponent;
  }
  if (exponent > max_exponent) return inf;
  const uint32_t fraction = static_cast<uint32_t>(mantissa) - (1u << mantissa_bits);
  return (static_cast<uint32_t>(exponent + exponent_bias) << mantissa_bits) | fraction;
}

uint16_t reference_fp16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7e00;
  if (std::isinf(f)) return sign | 0x7c00;
  return static_cast<uint16_t>(sign | reference_round(std::fabs(static_cast<double>(f)), 10, 15, -14, 15));
}

uint16_t reference_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  if (std::isinf(f)) return sign | 0x7f80;
  return static_cast<uint16_t>(sign | reference_round(std::fabs(static_cast<double>(f)), 7, 127, -126, 127));
}

// Exact value of an fp16 encoding, from the definition.
double fp16_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int fraction = h & 0x3ff;
  const double magnitude = exponent == 0 ? std::ldexp(fraction, -24) : std::ldexp(1024 + fraction, exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

float random_float_any_exponent(std::mt19937& rng) {
  // Uniform over bit patterns: every exponent (subnormals, NaN and infinity included) is hit.
  return std::bit_cast<float>(static_cast<uint32_t>(rng()));
}

}  // namespace

TEST_CASE("fp16 widening is exact for all 65536 encodings") {
  for (uint32_t h = 0; h < 65536; ++h) {
    CAPTURE(h);
    const float f = latte::fp16_to_fp32(static_cast<uint16_t>(h));
    const int exponent = (h >> 10) & 0x1f;
    if (exponent == 0x1f && (h & 0x3ff) != 0) {
      REQUIRE(std::isnan(f));
      const uint32_t bits = std::bit_cast<uint32_t>(f);
      CHECK((bits >> 13 & 0x1ff) == (h & 0x1ff));  // payload kept
      CHECK((bits & 0x00400000u) != 0);            // and quiet
      CHECK(std::signbit(f) == ((h & 0x8000) != 0));
    } else if (exponent == 0x1f) {
      CHECK(std::isinf(f));
      CHECK(std::signbit(f) == ((h & 0x8000) != 0));
    } else {
      REQUIRE(static_cast<double>(f) == fp16_value(static_cast<uint16_t>(h)));
      CHECK(std::signbit(f) == ((h & 0x8000) != 0));  // -0 stays -0
    }
  }
}

TEST_CASE("fp16 narrowing of literal values") {
  CHECK(latte::fp32_to_fp16(0.0f) == 0x0000);
  CHECK(latte::fp32_to_fp16(-0.0f) == 0x8000);
  CHECK(latte::fp32_to_fp16(1.0f) == 0x3c00);
  CHECK(latte::fp32_to_fp16(-2.0f) == 0xc000);
  CHECK(latte::fp32_to_fp16(0.1f) == 0x2e66);
  CHECK(latte::fp32_to_fp16(65504.0f) == 0x7bff);
  CHECK(latte::fp32_to_fp16(65519.99f) == 0x7bff);
  CHECK(latte::fp32_to_fp16(65520.0f) == 0x7c00);  // tie between 65504 and 2^16: to even = infinity
  CHECK(latte::fp32_to_fp16(1e10f) == 0x7c00);
  CHECK(latte::fp32_to_fp16(-INFINITY) == 0xfc00);
  CHECK(latte::fp32_to_fp16(NAN) == 0x7e00);
  CHECK(latte::fp32_to_fp16(-NAN) == 0xfe00);
  CHECK(latte::fp32_to_fp16(0x1p-24f) == 0x0001);    // smallest subnormal
  CHECK(latte::fp32_to_fp16(0x1p-25f) == 0x0000);    // half of it: tie to even (0)
  CHECK(latte::fp32_to_fp16(0x1.8p-24f) == 0x0002);  // 1.5 units: tie to even (2)
  CHECK(latte::fp32_to_fp16(0x1.000002p-25f) == 0x0001);
  CHECK(latte::fp32_to_fp16(0x1p-14f) == 0x0400);      // smallest normal
  CHECK(latte::fp32_to_fp16(0x1.ff8p-15f) == 0x03ff);  // largest subnormal
  CHECK(latte::fp32_to_fp16(0x1.ffap-15f) == 0x03ff);
  CHECK(latte::fp32_to_fp16(0x1.ffcp-15f) == 0x0400);       // tie: to even, into the normal range
  CHECK(latte::fp32_to_fp16(1.0f + 0x1p-11f) == 0x3c00);    // tie: to even
  CHECK(latte::fp32_to_fp16(1.0f + 0x1.8p-10f) == 0x3c02);  // tie between 0x3c01 and 0x3c02: to even
  CHECK(latte::fp32_to_fp16(1e-30f) == 0x0000);
}

TEST_CASE("fp16 narrowing rounds to nearest even on fresh random floats") {
  std::random_device seed_source;
  const uint32_t seed = seed_source();
  CAPTURE(seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> near_range(-70000.0f, 70000.0f);
  for (int i = 0; i < 200000; ++i) {
    const float f = i % 2 ? random_float_any_exponent(rng) : near_range(rng) * std::ldexp(1.0f, -(i % 40));
    CAPTURE(f);
    const uint16_t got = latte::fp32_to_fp16(f);
    REQUIRE(got == reference_fp16(f));
#ifdef __FLT16_MAX__
    if (!std::isnan(f)) {
      const _Float16 h = static_cast<_Float16>(f);
      uint16_t bits;
      std::memcpy(&bits, &h, sizeof bits);
      REQUIRE(got == bits);
    }
#endif
  }
}

TEST_CASE("fp16 narrowing inverts widening") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const bool is_nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff) != 0;
    if (is_nan) continue;
    CAPTURE(h);
    REQUIRE(latte::fp32_to_fp16(latte::fp16_to_fp32(static_cast<uint16_t>(h))) == h);
  }
}

TEST_CASE("bf16 conversions: exact widening, nearest-even narrowing, quiet NaN") {
  CHECK(latte::bf16_to_fp32(0x3f80) == 1.0f);
  CHECK(latte::bf16_to_fp32(0xc040) == -3.0f);
  CHECK(std::bit_cast<uint32_t>(latte::bf16_to_fp32(0x0001)) == 0x00010000u);
  CHECK(latte::fp32_to_bf16(1.0f) == 0x3f80);
  CHECK(latte::fp32_to_bf16(std::bit_cast<float>(0x3f808000u)) == 0x3f80);  // tie: to even
  CHECK(latte::fp32_to_bf16(std::bit_cast<float>(0x3f818000u)) == 0x3f82);  // tie: to even (up)
  CHECK(latte::fp32_to_bf16(std::bit_cast<float>(0x3f808001u)) == 0x3f81);
  CHECK(latte::fp32_to_bf16(std::bit_cast<float>(0x7f7fffffu)) == 0x7f80);  // FLT_MAX rounds to infinity
  CHECK(latte::fp32_to_bf16(std::bit_cast<float>(0x00018000u)) == 0x0002);  // subnormal kept, tie to even
  CHECK(latte::fp32_to_bf16(std::bit_cast<float>(0x7f800001u)) == 0x7fc0);  // signalling NaN quieted
  CHECK(latte::fp32_to_bf16(std::bit_cast<float>(0xffc00000u)) == 0xffc0);

  std::random_device seed_source;
  const uint32_t seed = seed_source();
  CAPTURE(seed);
  std::mt19937 rng(seed);
  for (int i = 0; i < 200000; ++i) {
    const float f = random_float_any_exponent(rng);
    CAPTURE(f);
    REQUIRE(latte::fp32_to_bf16(f) == reference_bf16(f));
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = latte::bf16_to_fp32(static_cast<uint16_t>(h));
    REQUIRE(std::bit_cast<uint32_t>(f) == h << 16);
    if (!std::isnan(f)) REQUIRE(latte::fp32_to_bf16(f) == h);
  }
}
