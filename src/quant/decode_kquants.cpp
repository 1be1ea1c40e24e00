// Decoders of the K-quant super-blocks (256 values): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and Q8_K. Value
// order and arithmetic follow ggml's dequantize_row_*_K exactly (sub-block scale first, d * sc, then
// times q, then minus the min), so the output is bit-identical. The loops run over runs of 16 or 32
// values that share a scale, with no per-value branches.
#include <latte/quant_blocks.hpp>

#include "quant/half_float.hpp"
#include "quant/kquant_scales.hpp"
#include "quant/row_codecs.hpp"

#include <cstddef>
#include <cstdint>

namespace latte::quant {

// Portable only: GCC 12 vectorizes this loop nest worse for AVX2 than for SSE2 (measured 1.7 vs
// 3.5 Gvalues/s).
void decode_q2_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockQ2K));  // scales[16] | qs[64] | d | dmin
    const float d = half_to_float(load_u16(block + offsetof(BlockQ2K, d)));
    const float dmin = half_to_float(load_u16(block + offsetof(BlockQ2K, dmin)));
    const uint8_t* scales = block + offsetof(BlockQ2K, scales);
    float* y = dst + b * qk_k;
    for (int h = 0; h < 2; ++h) {  // two halves of 128 values, 32 bytes of qs each
      const uint8_t* q = block + offsetof(BlockQ2K, qs) + 32 * h;
      for (int j = 0; j < 4; ++j) {  // bit pair j of each byte; 16-value sub-blocks 8h+2j, 8h+2j+1
        uint8_t level[32];
        for (int l = 0; l < 32; ++l) level[l] = static_cast<uint8_t>((q[l] >> (2 * j)) & 3);
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = scales[8 * h + 2 * j + half];
          const float dl = d * static_cast<float>(sc & 0x0f);
          const float ml = dmin * static_cast<float>(sc >> 4);
          float* out = y + 128 * h + 32 * j + 16 * half;
          for (int l = 0; l < 16; ++l) out[l] = dl * static_cast<float>(level[16 * half + l]) - ml;
        }
      }
    }
  }
}

LATTE_DECODER_CLONES void decode_q3_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    // hmask[32] | qs[64] | scales[12] | d
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockQ3K));
    const float d_all = half_to_float(load_u16(block + offsetof(BlockQ3K, d)));
    const uint8_t* hmask = block + offsetof(BlockQ3K, hmask);
    int8_t scales[16];  // 6-bit scales, offset by 32
    unpack_q3_k_scales(block + offsetof(BlockQ3K, scales), scales);
    float* y = dst + b * qk_k;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = block + offsetof(BlockQ3K, qs) + 32 * h;
      for (int j = 0; j < 4; ++j) {
        const int high_bit = 4 * h + j;  // bit of hmask[l] holding the third bit of these values
        int8_t level[32];                // low two bits, minus 4 unless the third bit is set
        for (int l = 0; l < 32; ++l) {
          level[l] = static_cast<int8_t>(((q[l] >> (2 * j)) & 3) - 4 + 4 * ((hmask[l] >> high_bit) & 1));
        }
        for (int half = 0; half < 2; ++half) {
          const float dl = d_all * static_cast<float>(scales[8 * h + 2 * j + half] - 32);
          float* out = y + 128 * h + 32 * j + 16 * half;
          for (int l = 0; l < 16; ++l) out[l] = dl * static_cast<float>(level[16 * half + l]);
        }
      }
    }
  }
}

LATTE_DECODER_CLONES void decode_q4_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockQ4K));  // d | dmin | scales[12] | qs[128]
    const float d = half_to_float(load_u16(block + offsetof(BlockQ4K, d)));
    const float dmin = half_to_float(load_u16(block + offsetof(BlockQ4K, dmin)));
    const uint8_t* scales = block + offsetof(BlockQ4K, scales);
    float* y = dst + b * qk_k;
    for (int c = 0; c < 4; ++c) {  // 64 values per 32 bytes of qs: low nibbles, then high nibbles
      const uint8_t* q = block + offsetof(BlockQ4K, qs) + 32 * c;
      const ScaleMin lo = k_scale_min(scales, 2 * c);
      const ScaleMin hi = k_scale_min(scales, 2 * c + 1);
      const float d1 = d * static_cast<float>(lo.scale);
      const float m1 = dmin * static_cast<float>(lo.min);
      const float d2 = d * static_cast<float>(hi.scale);
      const float m2 = dmin * static_cast<float>(hi.min);
      float* out = y + 64 * c;
      for (int l = 0; l < 32; ++l) out[l] = d1 * static_cast<float>(q[l] & 0x0f) - m1;
      for (int l = 0; l < 32; ++l) out[32 + l] = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

LATTE_DECODER_CLONES void decode_q5_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    // d | dmin | scales[12] | qh[32] | qs[128]
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockQ5K));
    const float d = half_to_float(load_u16(block + offsetof(BlockQ5K, d)));
    const float dmin = half_to_float(load_u16(block + offsetof(BlockQ5K, dmin)));
    const uint8_t* scales = block + offsetof(BlockQ5K, scales);
    const uint8_t* qh = block + offsetof(BlockQ5K, qh);
    float* y = dst + b * qk_k;
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = block + offsetof(BlockQ5K, qs) + 32 * c;
      const ScaleMin lo = k_scale_min(scales, 2 * c);
      const ScaleMin hi = k_scale_min(scales, 2 * c + 1);
      const float d1 = d * static_cast<float>(lo.scale);
      const float m1 = dmin * static_cast<float>(lo.min);
      const float d2 = d * static_cast<float>(hi.scale);
      const float m2 = dmin * static_cast<float>(hi.min);
      uint8_t level[64];
      for (int l = 0; l < 32; ++l) {
        level[l] = static_cast<uint8_t>((q[l] & 0x0f) | (((qh[l] >> (2 * c)) & 1) << 4));
        level[32 + l] = static_cast<uint8_t>((q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4));
      }
      float* out = y + 64 * c;
      for (int l = 0; l < 32; ++l) out[l] = d1 * static_cast<float>(level[l]) - m1;
      for (int l = 0; l < 32; ++l) out[32 + l] = d2 * static_cast<float>(level[32 + l]) - m2;
    }
  }
}

LATTE_DECODER_CLONES void decode_q6_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    // ql[128] | qh[64] | scales[16] (int8) | d
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockQ6K));
    const float d = half_to_float(load_u16(block + offsetof(BlockQ6K, d)));
    const auto* scales = reinterpret_cast<const int8_t*>(block + offsetof(BlockQ6K, scales));
    float* y = dst + b * qk_k;
    for (int h = 0; h < 2; ++h) {  // 128 values from 64 bytes of ql and 32 of qh
      const uint8_t* ql = block + offsetof(BlockQ6K, ql) + 64 * h;
      const uint8_t* qh = block + offsetof(BlockQ6K, qh) + 32 * h;
      const int8_t* sc = scales + 8 * h;
      for (int half = 0; half < 2; ++half) {  // l in [16 half, 16 half + 16) shares scales sc[half + 2j]
        const float d0 = d * static_cast<float>(sc[half + 0]);
        const float d1 = d * static_cast<float>(sc[half + 2]);
        const float d2 = d * static_cast<float>(sc[half + 4]);
        const float d3 = d * static_cast<float>(sc[half + 6]);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          const int q0 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
          const int q1 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
          const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          y[128 * h + l] = d0 * static_cast<float>(q0);
          y[128 * h + l + 32] = d1 * static_cast<float>(q1);
          y[128 * h + l + 64] = d2 * static_cast<float>(q2);
          y[128 * h + l + 96] = d3 * static_cast<float>(q3);
        }
      }
    }
  }
}

LATTE_DECODER_CLONES void decode_q8_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    // d (float) | qs[256] (int8) | bsums[16] (int16)
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockQ8K));
    const float d = load_f32(block + offsetof(BlockQ8K, d));
    const auto* qs = reinterpret_cast<const int8_t*>(block + offsetof(BlockQ8K, qs));
    float* y = dst + b * qk_k;
    for (int j = 0; j < qk_k; ++j) y[j] = d * static_cast<float>(qs[j]);
  }
}

LATTE_DECODER_CLONES void decode_iq4_xs(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    // d | scales_h | scales_l[4] | qs[128]
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockIq4Xs));
    const float d = half_to_float(load_u16(block + offsetof(BlockIq4Xs, d)));
    const uint32_t high = load_u16(block + offsetof(BlockIq4Xs, scales_h));
    const uint8_t* low = block + offsetof(BlockIq4Xs, scales_l);
    for (int s = 0; s < qk_k / 32; ++s) {
      const int ls = static_cast<int>(((low[s / 2] >> (4 * (s % 2))) & 0x0fu) | (((high >> (2 * s)) & 3u) << 4));
      const float dl = d * static_cast<float>(ls - 32);  // the sub-block's scale first, as ggml rounds it
      const uint8_t* qs = block + offsetof(BlockIq4Xs, qs) + 16 * s;
      float* y = dst + b * qk_k + 32 * s;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(k_iq4_levels[qs[j] & 0x0fu]);
        y[j + 16] = dl * static_cast<float>(k_iq4_levels[qs[j] >> 4u]);
      }
    }
  }
}

}  // namespace latte::quant
