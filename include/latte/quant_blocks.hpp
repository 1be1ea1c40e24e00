// Byte layouts of ggml's quantized blocks, shared by the CPU code and the CUDA kernels. Half-precision
// fields are stored as raw IEEE binary16 bits (uint16_t). Sizes are fixed by the file format.
//
//   const auto* blocks = reinterpret_cast<const latte::BlockQ4K*>(tensor_bytes.data());
//   float d = latte::fp16_to_fp32(blocks[0].d);
#pragma once

#include <cstdint>

namespace latte {

inline constexpr int qk4_0 = 32;         ///< values per Q4_0 / Q4_1 block
inline constexpr int qk5_0 = 32;         ///< values per Q5_0 / Q5_1 block
inline constexpr int qk8_0 = 32;         ///< values per Q8_0 / Q8_1 block
inline constexpr int qk_mxfp4 = 32;      ///< values per MXFP4 block
inline constexpr int qk_nvfp4 = 64;      ///< values per NVFP4 block (4 sub-blocks of 16)
inline constexpr int qk_nvfp4_sub = 16;  ///< values per NVFP4 sub-block (one UE4M3 scale each)
inline constexpr int qk1_0 = 128;        ///< values per Q1_0 block
inline constexpr int qk2_0 = 64;         ///< values per Q2_0 block
inline constexpr int qk_k = 256;         ///< values per K-quant super-block
inline constexpr int k_scale_size = 12;  ///< bytes of packed 6-bit scales/mins in Q4_K / Q5_K

/// Q4_0: x = (q - 8) * d, q in [0, 16). qs[j] holds value j (low nibble) and j+16 (high nibble).
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[qk4_0 / 2];
};
/// Q4_1: x = q * d + m (same nibble order as Q4_0).
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[qk4_0 / 2];
};
/// Q5_0: x = (q - 16) * d; low 4 bits as Q4_0, the fifth bit of value j is bit j of qh (little-endian u32).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[qk5_0 / 2];
};
/// Q5_1: x = q * d + m, bits as Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[qk5_0 / 2];
};
/// Q8_0: x = d * q.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[qk8_0];
};
/// Q8_1: x = d * q; s = d * sum(q) (used as a dot-product helper by ggml).
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[qk8_0];
};
/// Q2_K: 16 sub-blocks of 16. Value v = 128h + 32j + l (h < 2, j < 4, l < 32): q = (qs[32h + l] >> 2j) & 3,
/// scale byte sc = scales[8h + 2j + l/16]; x = (d * (sc & 15)) * q - dmin * (sc >> 4).
struct BlockQ2K {
  uint8_t scales[qk_k / 16];
  uint8_t qs[qk_k / 4];
  uint16_t d;
  uint16_t dmin;
};
/// Q3_K: 16 sub-blocks of 16, same value order as Q2_K. low = (qs[32h + l] >> 2j) & 3, high bit =
/// (hmask[l] >> (4h + j)) & 1, q = low + 4*high - 4 in [-4, 4). Sub-block k = 8h + 2j + l/16 has a 6-bit
/// scale s: low 4 bits in scales[k] & 15 (k < 8) or scales[k-8] >> 4 (k >= 8), high 2 bits
/// (scales[8 + k%4] >> 2*(k/4)) & 3; x = (d * (s - 32)) * q.
struct BlockQ3K {
  uint8_t hmask[qk_k / 8];
  uint8_t qs[qk_k / 4];
  uint8_t scales[12];
  uint16_t d;
};
/// Q4_K: 8 sub-blocks of 32. Value v = 64c + 32u + l: q = u ? qs[32c + l] >> 4 : qs[32c + l] & 15, sub-block
/// b = 2c + u. 6-bit scale/min of b: b < 4: sc = scales[b] & 63, m = scales[b+4] & 63; b >= 4:
/// sc = (scales[b+4] & 15) | (scales[b-4] >> 6) << 4, m = (scales[b+4] >> 4) | (scales[b] >> 6) << 4.
/// x = (d * sc) * q - dmin * m.
struct BlockQ4K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[k_scale_size];
  uint8_t qs[qk_k / 2];
};
/// Q5_K: as Q4_K plus a fifth bit: q += 16 * ((qh[l] >> (2c + u)) & 1).
struct BlockQ5K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[k_scale_size];
  uint8_t qh[qk_k / 8];
  uint8_t qs[qk_k / 2];
};
/// Q6_K: 16 sub-blocks of 16. Value v = 128h + 32j + l: low 4 bits from ql[64h + 32(j & 1) + l] (low nibble
/// for j < 2, high nibble for j >= 2), high 2 bits (qh[32h + l] >> 2j) & 3; q = bits - 32;
/// x = (d * scales[8h + 2j + l/16]) * q.
struct BlockQ6K {
  uint8_t ql[qk_k / 2];
  uint8_t qh[qk_k / 4];
  int8_t scales[qk_k / 16];
  uint16_t d;
};
/// Q8_K: x = d * q with a float scale; bsums[k] = sum of qs[16k..16k+15] (ggml's dot-product operand).
struct BlockQ8K {
  float d;
  int8_t qs[qk_k];
  int16_t bsums[qk_k / 16];
};
/// MXFP4 (OCP microscaling): e = E8M0 shared exponent, 32 E2M1 values as nibbles (same order as Q4_0).
/// x = kvalue[nibble] * 2^(e - 128), kvalue = twice the E2M1 value: {0,1,2,3,4,6,8,12, 0,-1,...,-12}.
struct BlockMxfp4 {
  uint8_t e;
  uint8_t qs[qk_mxfp4 / 2];
};
/// NVFP4: four sub-blocks of 16 E2M1 values, each with an unsigned E4M3 scale d[s] (bias 7, no sign).
/// Sub-block s: qs[8s + j] holds value j (low nibble) and j+8 (high nibble); x = kvalue * ue4m3(d[s]) / 2.
struct BlockNvfp4 {
  uint8_t d[qk_nvfp4 / qk_nvfp4_sub];
  uint8_t qs[qk_nvfp4 / 2];
};
/// Q1_0: x = bit ? d : -d; value j is bit j%8 of qs[j/8].
struct BlockQ1_0 {
  uint16_t d;
  uint8_t qs[qk1_0 / 8];
};
/// Q2_0: x = d * (q - 1), q in [0, 4); value j is bits 2*(j%4).. of qs[j/4].
struct BlockQ2_0 {
  uint16_t d;
  uint8_t qs[qk2_0 / 4];
};

/// The 16 signed levels of IQ4_NL and IQ4_XS, indexed by a value's 4-bit code (a non-uniform grid, denser near 0).
inline constexpr int8_t k_iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
/// IQ4_NL: x = d * k_iq4_levels[code]; codes as Q4_0's (qs[j] low nibble = value j, high nibble = value j+16).
struct BlockIq4Nl {
  uint16_t d;
  uint8_t qs[qk4_0 / 2];
};
/// IQ4_XS: eight sub-blocks of 32; sub-block s has the 6-bit scale ls = (scales_l[s/2] >> 4(s%2) & 15) |
/// ((scales_h >> 2s & 3) << 4) and x = d (ls - 32) k_iq4_levels[code], codes of sub-block s in qs[16s .. 16s+16)
/// laid out as IQ4_NL's.
struct BlockIq4Xs {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[qk_k / 64];
  uint8_t qs[qk_k / 2];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2K) == 84);
static_assert(sizeof(BlockQ3K) == 110);
static_assert(sizeof(BlockQ4K) == 144);
static_assert(sizeof(BlockQ5K) == 176);
static_assert(sizeof(BlockQ6K) == 210);
static_assert(sizeof(BlockQ8K) == 292);
static_assert(sizeof(BlockMxfp4) == 17);
static_assert(sizeof(BlockNvfp4) == 36);
static_assert(sizeof(BlockQ1_0) == 18);
static_assert(sizeof(BlockQ2_0) == 18);
static_assert(sizeof(BlockIq4Nl) == 18);
static_assert(sizeof(BlockIq4Xs) == 136);

}  // namespace latte
