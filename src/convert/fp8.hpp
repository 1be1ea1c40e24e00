// 8-bit float decoding for checkpoints stored in fp8 (DeepSeek-V3 / R1 and GLM releases):
// E4M3 "fn" (torch.float8_e4m3fn: bias 7, no infinities, NaN = S.1111.111, max 448) and E5M2
// (torch.float8_e5m2: IEEE-like, bias 15, with infinities and NaNs). Both decode exactly to fp32.
//
//   float w = latte::convert::fp8_e4m3_to_float(0x38);   // 1.0f
//   float x = latte::convert::fp8_e5m2_to_float(0x3C);   // 1.0f
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace latte::convert {

namespace detail {

constexpr float e4m3_value(uint8_t bits) {
  const uint32_t sign = bits >> 7;
  const uint32_t exponent = (bits >> 3) & 0xF;  // bias 7
  const uint32_t mantissa = bits & 0x7;         // 3 bits
  if (exponent == 0xF && mantissa == 0x7) {
    return sign ? -std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::quiet_NaN();
  }
  uint32_t f32 = 0;
  if (exponent == 0) {
    if (mantissa == 0) {
      f32 = 0;
    } else {
      // Subnormal: mantissa * 2^-9. Normalise into an fp32 exponent.
      int shift = 0;
      uint32_t m = mantissa;
      while ((m & 0x8) == 0) {
        m <<= 1;
        ++shift;
      }
      f32 = ((127u - 6u - static_cast<uint32_t>(shift)) << 23) | ((m & 0x7) << 20);
    }
  } else {
    f32 = ((exponent + 127u - 7u) << 23) | (mantissa << 20);
  }
  return std::bit_cast<float>((sign << 31) | f32);
}

constexpr float e5m2_value(uint8_t bits) {
  // E5M2 is the upper byte of an IEEE half: widen the half.
  const uint32_t sign = bits >> 7;
  const uint32_t exponent = (bits >> 2) & 0x1F;  // bias 15
  const uint32_t mantissa = bits & 0x3;          // 2 bits
  uint32_t f32 = 0;
  if (exponent == 0x1F) {
    f32 = mantissa == 0 ? 0x7F800000u : 0x7FC00000u;
  } else if (exponent == 0) {
    if (mantissa != 0) {
      int shift = 0;
      uint32_t m = mantissa;
      while ((m & 0x4) == 0) {
        m <<= 1;
        ++shift;
      }
      f32 = ((127u - 14u - static_cast<uint32_t>(shift)) << 23) | ((m & 0x3) << 21);
    }
  } else {
    f32 = ((exponent + 127u - 15u) << 23) | (mantissa << 21);
  }
  return std::bit_cast<float>((sign << 31) | f32);
}

template <float (*Decode)(uint8_t)>
constexpr std::array<float, 256> make_table() {
  std::array<float, 256> table{};
  for (int i = 0; i < 256; ++i) table[static_cast<size_t>(i)] = Decode(static_cast<uint8_t>(i));
  return table;
}

inline constexpr std::array<float, 256> e4m3_table = make_table<e4m3_value>();
inline constexpr std::array<float, 256> e5m2_table = make_table<e5m2_value>();

}  // namespace detail

/// Decodes one float8 E4M3 ("fn") value.
inline float fp8_e4m3_to_float(uint8_t bits) noexcept { return detail::e4m3_table[bits]; }
/// Decodes one float8 E5M2 value.
inline float fp8_e5m2_to_float(uint8_t bits) noexcept { return detail::e5m2_table[bits]; }

}  // namespace latte::convert
