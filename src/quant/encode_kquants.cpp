// Reference encoders of the K-quant super-blocks, making ggml's quantize_row_*_K_ref choices: per
// sub-block scale searches (kquant_search.hpp), the super-block scale from the largest sub-block
// scale, sub-block scales quantized to 4, 6 or 8 bits, then every value re-rounded against the
// stored (fp16-rounded) scales. Same bytes as ggml on the same finite input.
#include <latte/quant_blocks.hpp>

#include "quant/half_float.hpp"
#include "quant/kquant_scales.hpp"
#include "quant/kquant_search.hpp"
#include "quant/row_codecs.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace latte::quant {
namespace {

inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Packs 2-bit levels (256, in [0, 4)) into 64 bytes: byte 32h + l holds values 128h + l + 32k at bits 2k.
void pack_2bit(const uint8_t* levels, uint8_t* qs) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* l = levels + 128 * h;
    for (int i = 0; i < 32; ++i) {
      qs[32 * h + i] = static_cast<uint8_t>(l[i] | (l[i + 32] << 2) | (l[i + 64] << 4) | (l[i + 96] << 6));
    }
  }
}

// Q4_K / Q5_K sub-block search: weights av_x + |x| with av_x the sub-block's RMS.
float k4_sub_block_search(const float* x, int nmax, ScaleSteps steps, uint8_t* levels, float& negated_min) {
  float sum_x2 = 0;
  for (int l = 0; l < 32; ++l) sum_x2 += x[l] * x[l];
  const float av_x = std::sqrt(sum_x2 / 32);
  float weights[32];
  for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[l]);
  uint8_t scratch[32];
  return affine_scale_search(x, 32, weights, nmax, steps, false, levels, scratch, negated_min);
}

// Shared by Q4_K and Q5_K: searches the 8 sub-blocks, writes d, dmin and the packed 6-bit scales,
// and re-rounds every value to [0, nmax] against the stored scales. `d_offset` etc. locate fields.
void encode_k4_scales_and_levels(const float* x, int nmax, ScaleSteps steps, uint8_t* block, size_t d_offset,
                                 size_t dmin_offset, size_t scales_offset, uint8_t* levels) {
  float scales[8];
  float mins[8];
  float max_scale = 0;  // scales are >= 0 after deducting the min
  float max_min = 0;
  for (int j = 0; j < 8; ++j) {
    scales[j] = k4_sub_block_search(x + 32 * j, nmax, steps, levels + 32 * j, mins[j]);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t* packed = block + scales_offset;
  for (int j = 0; j < 8; ++j) {
    // ggml stores the rounded value in a uint8_t before clamping to 63.
    uint8_t ls = static_cast<uint8_t>(round_nearest_even(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(round_nearest_even(inv_min * mins[j]));
    ls = ls < 63 ? ls : 63;
    lm = lm < 63 ? lm : 63;
    pack_k_scale_min(packed, j, ls, lm);
  }
  store_u16(block + d_offset, float_to_half(max_scale / 63.f));
  store_u16(block + dmin_offset, float_to_half(max_min / 63.f));

  const float d_all = half_to_float(load_u16(block + d_offset));
  const float dmin_all = half_to_float(load_u16(block + dmin_offset));
  for (int j = 0; j < 8; ++j) {
    const ScaleMin sm = k_scale_min(packed, j);
    const float d = d_all * static_cast<float>(sm.scale);
    if (d == 0.0f) continue;  // keeps the search's levels, as ggml does
    const float dm = dmin_all * static_cast<float>(sm.min);
    for (int i = 0; i < 32; ++i) {
      levels[32 * j + i] = static_cast<uint8_t>(clamp_int(round_nearest_even((x[32 * j + i] + dm) / d), 0, nmax));
    }
  }
}

}  // namespace

void encode_q2_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * qk_k;
    uint8_t* block = dst + b * static_cast<int64_t>(sizeof(BlockQ2K));  // scales[16] | qs[64] | d | dmin
    uint8_t* packed = block + offsetof(BlockQ2K, scales);
    uint8_t levels[qk_k];
    float scales[16];
    float mins[16];
    float max_scale = 0;
    float max_min = 0;
    for (int j = 0; j < 16; ++j) {
      float weights[16];
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      uint8_t scratch[16];
      scales[j] =
          affine_scale_search(x + 16 * j, 16, weights, 3, {-0.5f, 0.1f, 15}, true, levels + 16 * j, scratch, mins[j]);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    // 4-bit sub-block scales (low nibble) and mins (high nibble) against d = max/15, dmin = max_min/15.
    if (max_scale > 0) {
      const float iscale = 15.f / max_scale;
      for (int j = 0; j < 16; ++j) packed[j] = static_cast<uint8_t>(round_nearest_even(iscale * scales[j]));
      store_u16(block + offsetof(BlockQ2K, d), float_to_half(max_scale / 15.f));
    } else {
      for (int j = 0; j < 16; ++j) packed[j] = 0;
      store_u16(block + offsetof(BlockQ2K, d), float_to_half(0.f));
    }
    if (max_min > 0) {
      const float iscale = 15.f / max_min;
      for (int j = 0; j < 16; ++j) {
        packed[j] = static_cast<uint8_t>(packed[j] | (round_nearest_even(iscale * mins[j]) << 4));
      }
      store_u16(block + offsetof(BlockQ2K, dmin), float_to_half(max_min / 15.f));
    } else {
      store_u16(block + offsetof(BlockQ2K, dmin), float_to_half(0.f));
    }
    const float d_all = half_to_float(load_u16(block + offsetof(BlockQ2K, d)));
    const float dmin_all = half_to_float(load_u16(block + offsetof(BlockQ2K, dmin)));
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * static_cast<float>(packed[j] & 0x0f);
      if (d == 0.0f) continue;
      const float dm = dmin_all * static_cast<float>(packed[j] >> 4);
      for (int i = 0; i < 16; ++i) {
        levels[16 * j + i] = static_cast<uint8_t>(clamp_int(round_nearest_even((x[16 * j + i] + dm) / d), 0, 3));
      }
    }
    pack_2bit(levels, block + offsetof(BlockQ2K, qs));
  }
}

void encode_q3_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * qk_k;
    // hmask[32] | qs[64] | scales[12] | d
    uint8_t* block = dst + b * static_cast<int64_t>(sizeof(BlockQ3K));
    int8_t levels[qk_k];  // in [0, 8): q + 4
    float scales[16];
    float max_scale = 0;  // the sub-block scale of largest magnitude, with its sign
    float amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = q3_scale_search(x + 16 * j, 16, 4, levels + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    // 6-bit signed sub-block scales (offset by 32) against d = max_scale / -32.
    uint8_t* packed = block + offsetof(BlockQ3K, scales);
    if (max_scale != 0.0f) {
      const float iscale = -32.f / max_scale;
      int stored[16];
      for (int j = 0; j < 16; ++j) {
        const auto l = static_cast<int8_t>(round_nearest_even(iscale * scales[j]));
        stored[j] = clamp_int(l, -32, 31) + 32;
      }
      pack_q3_k_scales(stored, packed);
      store_u16(block + offsetof(BlockQ3K, d), float_to_half(1 / iscale));
    } else {
      for (int i = 0; i < 12; ++i) packed[i] = 0;
      store_u16(block + offsetof(BlockQ3K, d), float_to_half(0.f));
    }
    int8_t unpacked[16];
    unpack_q3_k_scales(packed, unpacked);
    const float d_all = half_to_float(load_u16(block + offsetof(BlockQ3K, d)));
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * static_cast<float>(unpacked[j] - 32);
      if (d == 0.0f) continue;
      for (int i = 0; i < 16; ++i) {
        levels[16 * j + i] = static_cast<int8_t>(clamp_int(round_nearest_even(x[16 * j + i] / d), -4, 3) + 4);
      }
    }
    // The third bit of value j goes to bit j/32 of hmask[j % 32]; the low two bits pack as Q2_K.
    uint8_t* hmask = block + offsetof(BlockQ3K, hmask);
    for (int i = 0; i < 32; ++i) hmask[i] = 0;
    uint8_t low[qk_k];
    for (int j = 0; j < qk_k; ++j) {
      int l = levels[j];
      if (l > 3) {
        hmask[j % 32] = static_cast<uint8_t>(hmask[j % 32] | (1 << (j / 32)));
        l -= 4;
      }
      low[j] = static_cast<uint8_t>(l);
    }
    pack_2bit(low, block + offsetof(BlockQ3K, qs));
  }
}

void encode_q4_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * qk_k;
    uint8_t* block = dst + b * static_cast<int64_t>(sizeof(BlockQ4K));  // d | dmin | scales[12] | qs[128]
    uint8_t levels[qk_k];
    encode_k4_scales_and_levels(x, 15, {-1.f, 0.1f, 20}, block, offsetof(BlockQ4K, d), offsetof(BlockQ4K, dmin),
                                offsetof(BlockQ4K, scales), levels);
    // Byte 32c + l: value 64c + l in the low nibble, 64c + 32 + l in the high nibble.
    uint8_t* qs = block + offsetof(BlockQ4K, qs);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        qs[32 * c + l] = static_cast<uint8_t>(levels[64 * c + l] | (levels[64 * c + 32 + l] << 4));
      }
    }
  }
}

void encode_q5_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * qk_k;
    // d | dmin | scales[12] | qh[32] | qs[128]
    uint8_t* block = dst + b * static_cast<int64_t>(sizeof(BlockQ5K));
    uint8_t levels[qk_k];
    encode_k4_scales_and_levels(x, 31, {-0.5f, 0.1f, 15}, block, offsetof(BlockQ5K, d), offsetof(BlockQ5K, dmin),
                                offsetof(BlockQ5K, scales), levels);
    // Low nibbles as Q4_K; the fifth bit of value 64c + 32u + l is bit 2c + u of qh[l].
    uint8_t* qs = block + offsetof(BlockQ5K, qs);
    uint8_t* qh = block + offsetof(BlockQ5K, qh);
    for (int l = 0; l < 32; ++l) qh[l] = 0;
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = levels[64 * c + l];
        const int hi = levels[64 * c + 32 + l];
        qh[l] = static_cast<uint8_t>(qh[l] | ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
        qs[32 * c + l] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
      }
    }
  }
}

void encode_q6_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * qk_k;
    // ql[128] | qh[64] | scales[16] (int8) | d
    uint8_t* block = dst + b * static_cast<int64_t>(sizeof(BlockQ6K));
    int8_t levels[qk_k];  // in [0, 64): q + 32
    float scales[16];
    float max_scale = 0;  // the sub-block scale of largest magnitude, with its sign
    float max_abs_scale = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = symmetric_scale_search(x + 16 * j, 16, 32, levels + 16 * j);
      const float abs_scale = std::fabs(scales[j]);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scales[j];
      }
    }
    if (max_abs_scale < k_all_zero_threshold) {
      std::memset(block, 0, sizeof(BlockQ6K));
      continue;
    }
    // 8-bit signed sub-block scales against d = max_scale / -128.
    const float iscale = -128.f / max_scale;
    store_u16(block + offsetof(BlockQ6K, d), float_to_half(1 / iscale));
    auto* stored = reinterpret_cast<int8_t*>(block + offsetof(BlockQ6K, scales));
    for (int j = 0; j < 16; ++j) {
      const int l = round_nearest_even(iscale * scales[j]);
      stored[j] = static_cast<int8_t>(l < 127 ? l : 127);
    }
    const float d_all = half_to_float(load_u16(block + offsetof(BlockQ6K, d)));
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * static_cast<float>(stored[j]);
      if (d == 0.0f) continue;
      for (int i = 0; i < 16; ++i) {
        levels[16 * j + i] = static_cast<int8_t>(clamp_int(round_nearest_even(x[16 * j + i] / d), -32, 31) + 32);
      }
    }
    // Value 128h + 32k + l: low nibble in ql[64h + 32(k & 1) + l] (k >= 2: high nibble), top two bits
    // at bit 2k of qh[32h + l].
    uint8_t* ql = block + offsetof(BlockQ6K, ql);
    uint8_t* qh = block + offsetof(BlockQ6K, qh);
    for (int h = 0; h < 2; ++h) {
      const int8_t* l = levels + 128 * h;
      for (int i = 0; i < 32; ++i) {
        ql[64 * h + i] = static_cast<uint8_t>((l[i] & 0x0f) | ((l[i + 64] & 0x0f) << 4));
        ql[64 * h + 32 + i] = static_cast<uint8_t>((l[i + 32] & 0x0f) | ((l[i + 96] & 0x0f) << 4));
        qh[32 * h + i] = static_cast<uint8_t>((l[i] >> 4) | ((l[i + 32] >> 4) << 2) | ((l[i + 64] >> 4) << 4) |
                                              ((l[i + 96] >> 4) << 6));
      }
    }
  }
}

void encode_q8_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* x = src + b * qk_k;
    // d (float) | qs[256] (int8) | bsums[16] (int16)
    uint8_t* block = dst + b * static_cast<int64_t>(sizeof(BlockQ8K));
    auto* qs = reinterpret_cast<int8_t*>(block + offsetof(BlockQ8K, qs));
    float max = 0;
    float amax = 0;
    for (int j = 0; j < qk_k; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    float d = 0;
    if (amax != 0.0f) {
      const float iscale = -127.f / max;
      for (int j = 0; j < qk_k; ++j) {
        const int v = round_nearest_even(iscale * x[j]);
        qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
      }
      d = 1 / iscale;
    } else {
      std::memset(qs, 0, qk_k);
    }
    std::memcpy(block + offsetof(BlockQ8K, d), &d, sizeof d);
    // ggml leaves bsums unwritten for an all-zero block; here they are the (zero) sums as well.
    for (int k = 0; k < qk_k / 16; ++k) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += qs[16 * k + i];
      const auto s = static_cast<int16_t>(sum);
      std::memcpy(block + offsetof(BlockQ8K, bsums) + 2 * k, &s, sizeof s);
    }
  }
}

}  // namespace latte::quant
