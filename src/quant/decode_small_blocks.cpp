// Decoders of the small-block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 (32 values), MXFP4 (32),
// NVFP4 (64), Q1_0 (128) and Q2_0 (64). Each value is computed with the same float operations, in
// the same order, as ggml's dequantize_row_* (e.g. Q4_1: q * d + m, never fused), so the output is
// bit-identical. Inner loops have no per-value branches and vectorize.
#include <latte/quant_blocks.hpp>

#include "quant/half_float.hpp"
#include "quant/row_codecs.hpp"

#include <bit>
#include <cstddef>
#include <cstdint>

namespace latte::quant {
namespace {

// ggml's MXFP4/NVFP4 value table: twice the E2M1 value (nibble 8 is +0, not -0).
constexpr int8_t k_e2m1_doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
inline int e2m1_doubled(uint32_t nibble) { return k_e2m1_doubled[nibble & 15u]; }

}  // namespace

// Q4_0, Q4_1, Q5_0, Q5_1, MXFP4 and NVFP4 stay portable: GCC 12 vectorizes them worse for AVX2 than
// for SSE2 (measured 1.2 vs 7.2 Gvalues/s for Q4_0).
void decode_q4_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockQ4_0));  // d | qs[16]
    const float d = half_to_float(load_u16(block + offsetof(BlockQ4_0, d)));
    const uint8_t* qs = block + offsetof(BlockQ4_0, qs);
    float* y = dst + b * qk4_0;
    int8_t q[qk4_0];  // levels first, then one multiply loop: the shape compilers vectorize best
    for (int j = 0; j < qk4_0 / 2; ++j) {
      q[j] = static_cast<int8_t>((qs[j] & 0x0f) - 8);
      q[j + qk4_0 / 2] = static_cast<int8_t>((qs[j] >> 4) - 8);
    }
    for (int j = 0; j < qk4_0; ++j) y[j] = static_cast<float>(q[j]) * d;
  }
}

void decode_q4_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockQ4_1));  // d | m | qs[16]
    const float d = half_to_float(load_u16(block + offsetof(BlockQ4_1, d)));
    const float m = half_to_float(load_u16(block + offsetof(BlockQ4_1, m)));
    const uint8_t* qs = block + offsetof(BlockQ4_1, qs);
    float* y = dst + b * qk4_0;
    uint8_t q[qk4_0];
    for (int j = 0; j < qk4_0 / 2; ++j) {
      q[j] = static_cast<uint8_t>(qs[j] & 0x0f);
      q[j + qk4_0 / 2] = static_cast<uint8_t>(qs[j] >> 4);
    }
    for (int j = 0; j < qk4_0; ++j) y[j] = static_cast<float>(q[j]) * d + m;
  }
}

void decode_q5_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockQ5_0));  // d | qh (u32) | qs[16]
    const float d = half_to_float(load_u16(block + offsetof(BlockQ5_0, d)));
    const uint32_t qh = load_u32(block + offsetof(BlockQ5_0, qh));
    const uint8_t* qs = block + offsetof(BlockQ5_0, qs);
    float* y = dst + b * qk5_0;
    int8_t q[qk5_0];
    for (int j = 0; j < qk5_0 / 2; ++j) {
      q[j] = static_cast<int8_t>(((qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4)) - 16);
      q[j + qk5_0 / 2] = static_cast<int8_t>(((qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4)) - 16);
    }
    for (int j = 0; j < qk5_0; ++j) y[j] = static_cast<float>(q[j]) * d;
  }
}

void decode_q5_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockQ5_1));  // d | m | qh (u32) | qs[16]
    const float d = half_to_float(load_u16(block + offsetof(BlockQ5_1, d)));
    const float m = half_to_float(load_u16(block + offsetof(BlockQ5_1, m)));
    const uint32_t qh = load_u32(block + offsetof(BlockQ5_1, qh));
    const uint8_t* qs = block + offsetof(BlockQ5_1, qs);
    float* y = dst + b * qk5_0;
    uint8_t q[qk5_0];
    for (int j = 0; j < qk5_0 / 2; ++j) {
      q[j] = static_cast<uint8_t>((qs[j] & 0x0f) | (((qh >> j) & 1u) << 4));
      q[j + qk5_0 / 2] = static_cast<uint8_t>((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
    }
    for (int j = 0; j < qk5_0; ++j) y[j] = static_cast<float>(q[j]) * d + m;
  }
}

LATTE_DECODER_CLONES void decode_q8_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockQ8_0));  // d | qs[32] (int8)
    const float d = half_to_float(load_u16(block + offsetof(BlockQ8_0, d)));
    const auto* qs = reinterpret_cast<const int8_t*>(block + offsetof(BlockQ8_0, qs));
    float* y = dst + b * qk8_0;
    for (int j = 0; j < qk8_0; ++j) y[j] = static_cast<float>(qs[j]) * d;
  }
}

LATTE_DECODER_CLONES void decode_q8_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockQ8_1));  // d | s | qs[32] (int8)
    const float d = half_to_float(load_u16(block + offsetof(BlockQ8_1, d)));
    const auto* qs = reinterpret_cast<const int8_t*>(block + offsetof(BlockQ8_1, qs));
    float* y = dst + b * qk8_0;
    for (int j = 0; j < qk8_0; ++j) y[j] = static_cast<float>(qs[j]) * d;
  }
}

void decode_mxfp4(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockMxfp4));  // e | qs[16]
    const float d = e8m0_to_float_half(block[offsetof(BlockMxfp4, e)]);
    const uint8_t* qs = block + offsetof(BlockMxfp4, qs);
    float* y = dst + b * qk_mxfp4;
    int8_t q[qk_mxfp4];
    for (int j = 0; j < qk_mxfp4 / 2; ++j) {
      q[j] = static_cast<int8_t>(e2m1_doubled(qs[j] & 0x0fu));
      q[j + qk_mxfp4 / 2] = static_cast<int8_t>(e2m1_doubled(qs[j] >> 4u));
    }
    for (int j = 0; j < qk_mxfp4; ++j) y[j] = static_cast<float>(q[j]) * d;
  }
}

void decode_nvfp4(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int sub_blocks = qk_nvfp4 / qk_nvfp4_sub;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockNvfp4));  // d[4] | qs[32]
    for (int s = 0; s < sub_blocks; ++s) {
      const float d = ue4m3_to_float_half(block[offsetof(BlockNvfp4, d) + s]);
      const uint8_t* qs = block + offsetof(BlockNvfp4, qs) + s * (qk_nvfp4_sub / 2);
      float* y = dst + b * qk_nvfp4 + s * qk_nvfp4_sub;
      int8_t q[qk_nvfp4_sub];
      for (int j = 0; j < qk_nvfp4_sub / 2; ++j) {
        q[j] = static_cast<int8_t>(e2m1_doubled(qs[j] & 0x0fu));
        q[j + qk_nvfp4_sub / 2] = static_cast<int8_t>(e2m1_doubled(qs[j] >> 4u));
      }
      for (int j = 0; j < qk_nvfp4_sub; ++j) y[j] = static_cast<float>(q[j]) * d;
    }
  }
}

LATTE_DECODER_CLONES void decode_iq4_nl(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockIq4Nl));  // d | qs[16]
    const float d = half_to_float(load_u16(block + offsetof(BlockIq4Nl, d)));
    const uint8_t* qs = block + offsetof(BlockIq4Nl, qs);
    float* y = dst + b * qk4_0;
    for (int j = 0; j < qk4_0 / 2; ++j) {
      y[j] = d * static_cast<float>(k_iq4_levels[qs[j] & 0x0fu]);
      y[j + qk4_0 / 2] = d * static_cast<float>(k_iq4_levels[qs[j] >> 4u]);
    }
  }
}

LATTE_DECODER_CLONES void decode_q1_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockQ1_0));  // d | qs[16] (sign bits)
    // x = bit ? d : -d, done as a sign flip of d's bits when the bit is clear.
    const uint32_t d_float = std::bit_cast<uint32_t>(half_to_float(load_u16(block + offsetof(BlockQ1_0, d))));
    const uint8_t* qs = block + offsetof(BlockQ1_0, qs);
    float* y = dst + b * qk1_0;
    for (int byte = 0; byte < qk1_0 / 8; ++byte) {
      for (int bit = 0; bit < 8; ++bit) {
        const uint32_t clear = ((static_cast<uint32_t>(qs[byte]) >> bit) & 1u) ^ 1u;
        y[8 * byte + bit] = std::bit_cast<float>(d_float ^ (clear << 31));
      }
    }
  }
}

LATTE_DECODER_CLONES void decode_q2_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* block = src + b * static_cast<int64_t>(sizeof(BlockQ2_0));  // d | qs[16] (2-bit codes)
    const float d = half_to_float(load_u16(block + offsetof(BlockQ2_0, d)));
    const uint8_t* qs = block + offsetof(BlockQ2_0, qs);
    float* y = dst + b * qk2_0;
    for (int byte = 0; byte < qk2_0 / 4; ++byte) {
      for (int k = 0; k < 4; ++k) y[4 * byte + k] = static_cast<float>(((qs[byte] >> (2 * k)) & 3) - 1) * d;
    }
  }
}

}  // namespace latte::quant
