// The packed 6-bit sub-block scales of the K-quants: Q4_K / Q5_K keep 8 (scale, min) pairs in 12
// bytes, Q3_K keeps 16 scales in 12 bytes. Layouts as documented in latte/quant_blocks.hpp.
//
//   latte::quant::ScaleMin sm = latte::quant::k_scale_min(block.scales, 5);  // sub-block 5 of 8
//   latte::quant::pack_k_scale_min(block.scales, 5, sm.scale, sm.min);      // and back
#pragma once

#include <cstdint>

namespace latte::quant {

/// A Q4_K / Q5_K sub-block's 6-bit scale and min.
struct ScaleMin {
  uint8_t scale;
  uint8_t min;
};

/// Reads sub-block j (0..7) from the 12 packed bytes: j < 4 keeps its 6 bits in bytes j and j+4;
/// j >= 4 keeps its low 4 bits in byte j+4 (scale low nibble, min high nibble) and its top 2 bits in
/// the top bits of bytes j-4 (scale) and j (min).
inline ScaleMin k_scale_min(const uint8_t* packed, int j) {
  if (j < 4) return {static_cast<uint8_t>(packed[j] & 63), static_cast<uint8_t>(packed[j + 4] & 63)};
  return {static_cast<uint8_t>((packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4)),
          static_cast<uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4))};
}

/// Writes sub-block j's 6-bit scale and min (both < 64). Sub-blocks must be written in order 0..7
/// into zeroed bytes: j >= 4 ORs its top bits into bytes written by j - 4.
inline void pack_k_scale_min(uint8_t* packed, int j, uint8_t scale, uint8_t min) {
  if (j < 4) {
    packed[j] = scale;
    packed[j + 4] = min;
  } else {
    packed[j + 4] = static_cast<uint8_t>((scale & 0x0f) | ((min & 0x0f) << 4));
    packed[j - 4] = static_cast<uint8_t>(packed[j - 4] | ((scale >> 4) << 6));
    packed[j] = static_cast<uint8_t>(packed[j] | ((min >> 4) << 6));
  }
}

/// Unpacks Q3_K's 16 six-bit scales (still offset by 32): scale k has its low 4 bits in byte k
/// (k < 8, low nibble) or byte k-8 (high nibble), and its top 2 bits at bit 2*(k/4) of byte 8 + k%4.
inline void unpack_q3_k_scales(const uint8_t* packed, int8_t* scales) {
  for (int k = 0; k < 16; ++k) {
    const int low = k < 8 ? (packed[k] & 0x0f) : (packed[k - 8] >> 4);
    const int high = (packed[8 + k % 4] >> (2 * (k / 4))) & 3;
    scales[k] = static_cast<int8_t>(low | (high << 4));
  }
}

/// Packs Q3_K's 16 six-bit scales (each already offset by 32, in 0..63) into 12 bytes.
inline void pack_q3_k_scales(const int* scales, uint8_t* packed) {
  for (int i = 0; i < 12; ++i) packed[i] = 0;
  for (int k = 0; k < 16; ++k) {
    const int v = scales[k];
    if (k < 8) {
      packed[k] = static_cast<uint8_t>(v & 0x0f);
    } else {
      packed[k - 8] = static_cast<uint8_t>(packed[k - 8] | ((v & 0x0f) << 4));
    }
    packed[8 + k % 4] = static_cast<uint8_t>(packed[8 + k % 4] | ((v >> 4) << (2 * (k / 4))));
  }
}

}  // namespace latte::quant
