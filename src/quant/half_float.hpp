// Scalar conversions between float and the small float formats ggml stores: IEEE binary16, bfloat16,
// E8M0 (MXFP4 block exponents) and UE4M3 (NVFP4 sub-block scales). Inline and branch-light so the row
// decoders vectorize; the public latte::fp16_to_fp32 & co. forward here.
//
//   float d = latte::quant::half_to_float(block.d);
//   uint16_t h = latte::quant::float_to_half(0.1f);  // 0x2E66
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace latte::quant {

/// Exact widening of IEEE binary16 bits. NaNs keep their payload and come out quiet, as from ggml's
/// conversion (which multiplies, and so quiets a signalling NaN). Written with bit masks instead of
/// branches so that loops over it vectorize.
inline float half_to_float(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t shifted = static_cast<uint32_t>(h & 0x7fffu) << 13;  // exponent and mantissa in float position
  const uint32_t exponent = shifted & 0x0f800000u;
  const uint32_t is_special = 0u - static_cast<uint32_t>(exponent == 0x0f800000u);  // infinity or NaN
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(exponent == 0u);         // or zero
  const uint32_t has_payload = 0u - static_cast<uint32_t>((shifted & 0x007fe000u) != 0u);
  // Normal numbers: rebias the exponent from 15 to 127; infinity and NaN: rebias once more so the
  // exponent is all ones, and set the quiet bit of NaNs.
  const uint32_t normal = (shifted + (uint32_t{127 - 15} << 23) + (is_special & (uint32_t{128 - 16} << 23))) |
                          (is_special & has_payload & 0x00400000u);
  // Subnormals: read the mantissa as 1.m * 2^-14 and subtract 2^-14, leaving m * 2^-24 (exact).
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(shifted + 0x38800000u) - 0x1p-14f);
  return std::bit_cast<float>(sign | (subnormal & is_subnormal) | (normal & ~is_subnormal));
}

/// Narrowing to IEEE binary16 with round-to-nearest-even, as ggml's reference conversion: overflow
/// (|f| >= 65520) gives infinity, results below 2^-14 become subnormals, every NaN becomes 0x7E00.
inline uint16_t float_to_half(float f) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: rounds to infinity
  if (ax >= 0x38800000u) {                                              // >= 2^-14: a normal half
    const uint32_t rebiased = ax - (uint32_t{127 - 15} << 23);
    const uint32_t rounded = rebiased + 0x0fffu + ((rebiased >> 13) & 1u);  // nearest, ties to even
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  // Subnormal half (or zero): the value in units of 2^-24, rounded to nearest even.
  const uint32_t exponent = ax >> 23;
  if (exponent < 102) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
  const uint32_t mantissa = (ax & 0x007fffffu) | 0x00800000u;
  const uint32_t shift = 126 - exponent;  // 14..24
  const uint32_t quotient = mantissa >> shift;
  const uint32_t remainder = mantissa & ((1u << shift) - 1u);
  const uint32_t half_unit = 1u << (shift - 1);
  const uint32_t round_up = remainder > half_unit || (remainder == half_unit && (quotient & 1u)) ? 1u : 0u;
  return static_cast<uint16_t>(sign | (quotient + round_up));
}

/// Exact widening of bfloat16 bits (the top half of a float).
inline float bf16_to_float(uint16_t h) noexcept { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

/// Narrowing to bfloat16 as ggml does it: round to nearest even on the raw bits (subnormals kept,
/// overflow to infinity), NaNs quieted by setting bit 6.
inline uint16_t float_to_bf16(float f) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 64u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/// An MXFP4 block exponent times one half, as ggml uses it with its doubled E2M1 table:
/// 2^(e - 128) for every e (e = 0 and 1 give the float subnormals 2^-128 and 2^-127).
inline float e8m0_to_float_half(uint8_t e) noexcept {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  return std::bit_cast<float>(bits);
}

/// An NVFP4 sub-block scale (unsigned E4M3: 4 exponent bits with bias 7, 3 mantissa bits; bit 7
/// ignored) times one half, as ggml decodes it. 0x00 and 0x7F decode to zero.
inline float ue4m3_to_float_half(uint8_t x) noexcept {
  if (x == 0 || x == 0x7f) return 0.0f;
  const int exponent = (x >> 3) & 0xf;
  const int mantissa = x & 0x7;
  // Both branches are exact: a power of two times a small integer.
  const float value = exponent == 0 ? static_cast<float>(mantissa) * 0x1p-9f
                                    : static_cast<float>(8 + mantissa) *
                                          std::bit_cast<float>(static_cast<uint32_t>(127 + exponent - 10) << 23);
  return value * 0.5f;
}

/// Loads a little-endian uint16 from any address (blocks in a file need not be aligned).
inline uint16_t load_u16(const uint8_t* p) noexcept {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// Stores a little-endian uint16 at any address.
inline void store_u16(uint8_t* p, uint16_t v) noexcept { std::memcpy(p, &v, sizeof v); }

/// Loads a little-endian uint32 from any address.
inline uint32_t load_u32(const uint8_t* p) noexcept {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// Loads a float from any address.
inline float load_f32(const uint8_t* p) noexcept {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace latte::quant
