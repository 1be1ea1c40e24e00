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
inline constexpr int qk_k = 256;         ///< values per K-quant super-block
inline constexpr int k_scale_size = 12;  ///< bytes of packed 6-bit scales/mins in Q4_K / Q5_K

/// Q4_0: x = d * (q - 8), q in [0, 16). qs[j] holds value j (low nibble) and j+16 (high nibble).
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[qk4_0 / 2];
};
/// Q4_1: x = d * q + m.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[qk4_0 / 2];
};
/// Q5_0: x = d * (q - 16); the fifth bit of value j is bit j of qh.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[qk5_0 / 2];
};
/// Q5_1: x = d * q + m.
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
/// Q2_K: 16 sub-blocks of 16; scales[i] low nibble = scale, high nibble = min (4 bits each).
struct BlockQ2K {
  uint8_t scales[qk_k / 16];
  uint8_t qs[qk_k / 4];
  uint16_t d;
  uint16_t dmin;
};
/// Q3_K: 16 sub-blocks of 16, 6-bit scales packed in 12 bytes; hmask holds the third bit.
struct BlockQ3K {
  uint8_t hmask[qk_k / 8];
  uint8_t qs[qk_k / 4];
  uint8_t scales[12];
  uint16_t d;
};
/// Q4_K: 8 sub-blocks of 32, 6-bit scales and mins packed in 12 bytes; x = d*sc*q - dmin*m.
struct BlockQ4K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[k_scale_size];
  uint8_t qs[qk_k / 2];
};
/// Q5_K: as Q4_K with a fifth bit per value in qh.
struct BlockQ5K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[k_scale_size];
  uint8_t qh[qk_k / 8];
  uint8_t qs[qk_k / 2];
};
/// Q6_K: 16 sub-blocks of 16 with int8 scales; x = d * scale * (q - 32), q 6 bits (ql + qh).
struct BlockQ6K {
  uint8_t ql[qk_k / 2];
  uint8_t qh[qk_k / 4];
  int8_t scales[qk_k / 16];
  uint16_t d;
};
/// Q8_K: float scale, int8 values and per-16 sums (an intermediate format of ggml's dot products).
struct BlockQ8K {
  float d;
  int8_t qs[qk_k];
  int16_t bsums[qk_k / 16];
};
/// MXFP4 (OCP microscaling): e = E8M0 shared exponent, 32 E2M1 values as nibbles (same order as Q4_0).
struct BlockMxfp4 {
  uint8_t e;
  uint8_t qs[qk_mxfp4 / 2];
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

}  // namespace latte
