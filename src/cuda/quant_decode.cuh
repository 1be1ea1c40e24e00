// Device-side decoding of ggml blocks, shared by every kernel that reads quantized weights (GEMV,
// GEMM tile loaders, dequantize-to-bf16, embedding lookup). A "unit" is 32 consecutive values of a
// row; decode_codes<T>() turns one unit into 32 unsigned byte codes plus an affine map per 16 values
//     value_i = scale[i / 16] * code_i - offset[i / 16]
// which is exactly ggml's dequantize_row_* arithmetic regrouped (codes are small exact integers).
// Float types (F32, F16, BF16) have no codes: decode_floats<T>() returns the 32 values.
//
//   const uint8_t* blocks = staged_row;  // 16-byte aligned, first block of the staged range at offset 0
//   Unit32 u = decode_codes<GgmlType::q4_k>(blocks, unit);  float v = code_value(u.codes[0], 0);
#pragma once

#include <latte/quant.hpp>
#include <latte/quant_blocks.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

// The decoders are also host functions so that their bit manipulations can be checked against
// dequantize_row on a machine without a GPU.
#define LATTE_HD_INLINE __host__ __device__ __forceinline__

namespace latte::cuda::quant {

// ---- intrinsics with host twins ---------------------------------------------------------------
LATTE_HD_INLINE uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t selector) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, selector);
#else
  const uint64_t bytes = (uint64_t{b} << 32) | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i)
    r |= static_cast<uint32_t>((bytes >> (8 * ((selector >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
#endif
}
LATTE_HD_INLINE float bits_to_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

/// Compile-time facts about one ggml type as the kernels see it. Float types use a 32-value
/// pseudo-block so that every type is processed in units of 32 values.
template <GgmlType T>
struct BlockTraits;

#define LATTE_BLOCK_TRAITS(TYPE, VALUES, BYTES, IS_FLOAT) \
  template <>                                             \
  struct BlockTraits<GgmlType::TYPE> {                    \
    static constexpr int values = VALUES;                 \
    static constexpr int bytes = BYTES;                   \
    static constexpr bool is_float = IS_FLOAT;            \
  };
LATTE_BLOCK_TRAITS(f32, 32, 128, true)
LATTE_BLOCK_TRAITS(f16, 32, 64, true)
LATTE_BLOCK_TRAITS(bf16, 32, 64, true)
LATTE_BLOCK_TRAITS(q4_0, 32, 18, false)
LATTE_BLOCK_TRAITS(q4_1, 32, 20, false)
LATTE_BLOCK_TRAITS(q5_0, 32, 22, false)
LATTE_BLOCK_TRAITS(q5_1, 32, 24, false)
LATTE_BLOCK_TRAITS(q8_0, 32, 34, false)
LATTE_BLOCK_TRAITS(mxfp4, 32, 17, false)
LATTE_BLOCK_TRAITS(q2_k, 256, 84, false)
LATTE_BLOCK_TRAITS(q3_k, 256, 110, false)
LATTE_BLOCK_TRAITS(q4_k, 256, 144, false)
LATTE_BLOCK_TRAITS(q5_k, 256, 176, false)
LATTE_BLOCK_TRAITS(q6_k, 256, 210, false)
LATTE_BLOCK_TRAITS(iq4_nl, 32, 18, false)
LATTE_BLOCK_TRAITS(iq4_xs, 256, 136, false)
#undef LATTE_BLOCK_TRAITS

static_assert(BlockTraits<GgmlType::q4_0>::bytes == sizeof(BlockQ4_0));
static_assert(BlockTraits<GgmlType::q4_1>::bytes == sizeof(BlockQ4_1));
static_assert(BlockTraits<GgmlType::q5_0>::bytes == sizeof(BlockQ5_0));
static_assert(BlockTraits<GgmlType::q5_1>::bytes == sizeof(BlockQ5_1));
static_assert(BlockTraits<GgmlType::q8_0>::bytes == sizeof(BlockQ8_0));
static_assert(BlockTraits<GgmlType::mxfp4>::bytes == sizeof(BlockMxfp4));
static_assert(BlockTraits<GgmlType::q2_k>::bytes == sizeof(BlockQ2K));
static_assert(BlockTraits<GgmlType::q3_k>::bytes == sizeof(BlockQ3K));
static_assert(BlockTraits<GgmlType::q4_k>::bytes == sizeof(BlockQ4K));
static_assert(BlockTraits<GgmlType::q5_k>::bytes == sizeof(BlockQ5K));
static_assert(BlockTraits<GgmlType::q6_k>::bytes == sizeof(BlockQ6K));
static_assert(BlockTraits<GgmlType::iq4_nl>::bytes == sizeof(BlockIq4Nl));
static_assert(BlockTraits<GgmlType::iq4_xs>::bytes == sizeof(BlockIq4Xs));

/// Largest power of two (at most 16) dividing every block's start when the first block is 16-byte
/// aligned: the widest load a decoder may use on a block-relative offset that is a multiple of it.
template <GgmlType T>
inline constexpr int block_alignment = (BlockTraits<T>::bytes & 15) == 0  ? 16
                                       : (BlockTraits<T>::bytes & 7) == 0 ? 8
                                       : (BlockTraits<T>::bytes & 3) == 0 ? 4
                                       : (BlockTraits<T>::bytes & 1) == 0 ? 2
                                                                          : 1;

/// min(x, cap): the alignment a load may assume when the block start only promises `cap`.
constexpr int capped_alignment(int x, int cap) { return x < cap ? x : cap; }

/// 32 values as byte codes: value i is byte (i % 4) of codes[i / 4]; value = scale*code - offset.
struct Unit32 {
  uint32_t codes[8];
  float scale[2];   ///< for values 0..15 and 16..31
  float offset[2];  ///< for values 0..15 and 16..31
};

// ---- loads with a compile-time alignment promise ------------------------------------------------
template <int Align>
LATTE_HD_INLINE uint32_t load_u16(const uint8_t* p) {
  if constexpr (Align >= 2) {
    return *reinterpret_cast<const uint16_t*>(p);
  } else {
    return uint32_t{p[0]} | (uint32_t{p[1]} << 8);
  }
}
template <int Align>
LATTE_HD_INLINE uint32_t load_u32(const uint8_t* p) {
  if constexpr (Align >= 4) {
    return *reinterpret_cast<const uint32_t*>(p);
  } else {
    return load_u16<Align>(p) | (load_u16<Align>(p + 2) << 16);
  }
}
/// Loads 8 consecutive 32-bit words (32 bytes) starting at p.
template <int Align>
LATTE_HD_INLINE void load_words8(const uint8_t* p, uint32_t (&w)[8]) {
  if constexpr (Align >= 16) {
    const uint4 a = *reinterpret_cast<const uint4*>(p);
    const uint4 b = *reinterpret_cast<const uint4*>(p + 16);
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = load_u32<Align>(p + 4 * i);
  }
}
/// Loads 4 consecutive 32-bit words (16 bytes) starting at p.
template <int Align>
LATTE_HD_INLINE void load_words4(const uint8_t* p, uint32_t (&w)[4]) {
  if constexpr (Align >= 16) {
    const uint4 a = *reinterpret_cast<const uint4*>(p);
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = load_u32<Align>(p + 4 * i);
  }
}

LATTE_HD_INLINE float half_bits_to_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
#else
  return fp16_to_fp32(static_cast<uint16_t>(bits));
#endif
}
LATTE_HD_INLINE float bf16_bits_to_float(uint32_t bits) { return bits_to_float(bits << 16); }

/// Byte i (0..3) of `word` as an exact float, without the slow integer-to-float conversion unit:
/// 0x4B0000bb is 2^23 + bb as a float, and subtracting 2^23 is exact.
LATTE_HD_INLINE float code_value(uint32_t word, int i) {
  return bits_to_float(byte_perm(word, 0x4B000000u, 0x7540u | static_cast<unsigned>(i))) - 8388608.0f;
}

/// Spreads the low 4 bits of h to bit 0 of the 4 bytes of the result (bit k -> byte k).
LATTE_HD_INLINE uint32_t spread_nibble_to_bytes(uint32_t h) {
  return (h & 1u) | ((h & 2u) << 7) | ((h & 4u) << 14) | ((h & 8u) << 21);
}

/// Q4_K / Q5_K packed 6-bit scale and min of sub-block j (0..7), as ggml's get_scale_min_k4.
LATTE_HD_INLINE void k4_scale_min(const uint8_t* q, int j, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

/// Q3_K 6-bit signed scale i (0..15) from the 12 packed bytes, minus 32 (ggml's unpacking).
LATTE_HD_INLINE int q3k_scale(const uint8_t* raw, int i) {
  const int low = (raw[i % 8] >> (4 * (i / 8))) & 0xF;
  const int high = (raw[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (low | (high << 4)) - 32;
}

/// MXFP4 block scale: ggml's E8M0 "half" value, 2^(e - 128) (denormal for e < 2), bit for bit.
LATTE_HD_INLINE float mxfp4_scale(uint32_t e) {
  const uint32_t bits = e < 2 ? (e == 0 ? 0x00200000u : 0x00400000u) : (e - 1) << 23;
  return bits_to_float(bits);
}
/// E2M1 code (4 bits) -> 12 + twice its value, in [0, 24] (ggml's kvalues_mxfp4 shifted by 12).
LATTE_HD_INLINE uint32_t mxfp4_code(uint32_t nibble) {
  // doubled magnitudes {0, 1, 2, 3, 4, 6, 8, 12} selected by the low 3 bits
  const uint32_t magnitude = byte_perm(0x03020100u, 0x0C080604u, nibble & 7u) & 0xFFu;
  return (nibble & 8u) ? 12u - magnitude : 12u + magnitude;
}

/// Levels i .. i + 3 of k_iq4_levels as unsigned codes (level + 128, in 1 .. 241), byte j = level i + j.
constexpr uint32_t iq4_code_word(int i) {
  uint32_t w = 0;
  for (int j = 0; j < 4; ++j) w |= static_cast<uint32_t>(k_iq4_levels[i + j] + 128) << (8 * j);
  return w;
}
/// The IQ4 codes (k_iq4_levels[n] + 128) of the 8 4-bit codes n of one qs word: `low` of the low nibbles of its
/// bytes 0-3, `high` of the high ones. A byte permutation takes its selector from the low 16 bits, 3 bits per
/// nibble (bit 3 unread): so 4 nibbles of the word at a time index the table's first 8 levels and its last 8, a
/// third permutation keeps each byte from the half that the nibble's bit 3 names, and two more sort the 8 codes
/// into low and high nibbles: ~16 integer instructions for 8 codes (nvcc masks each variable selector with
/// 0x7777, 6 of them), where masking the nibbles into one selector per 4 codes took ~30.
LATTE_HD_INLINE void iq4_word_codes(uint32_t qs, uint32_t& low, uint32_t& high) {
  // per nibble k: byte k of the first 8 levels' lookup (0-3), or of the last 8's (4-7) when bit 3 is set
  const uint32_t pick = 0x32103210u | ((qs & 0x88888888u) >> 1);
  uint32_t half[2];  // half h: the codes of nibbles 4h .. 4h + 3 (bytes 2h, 2h + 1: low, high, low, high)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t nibbles = qs >> (16 * h);
    const uint32_t first = byte_perm(iq4_code_word(0), iq4_code_word(4), nibbles);
    const uint32_t last = byte_perm(iq4_code_word(8), iq4_code_word(12), nibbles);
    half[h] = byte_perm(first, last, pick >> (16 * h));
  }
  low = byte_perm(half[0], half[1], 0x6420u);
  high = byte_perm(half[0], half[1], 0x7531u);
}
/// The 32 IQ4 codes of a unit's 16 qs bytes (as 4 words): byte j holds value j (low nibble) and j + 16 (high), so
/// codes[i] are values 4i .. 4i + 3 and codes[4 + i] values 16 + 4i ...
LATTE_HD_INLINE void iq4_unit_codes(const uint32_t (&qs)[4], uint32_t (&codes)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) iq4_word_codes(qs[i], codes[i], codes[4 + i]);
}
/// IQ4_XS sub-block `unit`'s factor ls - 32 (-32 .. 31) from the super-block's scales_h and the scales_l byte
/// unit / 2; its scale is d * factor, rounded to float first as ggml does.
LATTE_HD_INLINE int iq4xs_scale_factor(uint32_t scales_h, uint32_t scales_l_byte, int unit) {
  return static_cast<int>(((scales_l_byte >> (4 * (unit % 2))) & 0xFu) | (((scales_h >> (2 * unit)) & 3u) << 4)) - 32;
}

/// Decodes unit `unit` (32 values) of a run of quantized blocks starting at `blocks`, which must be
/// aligned to min(16, MaxAlign) bytes (MaxAlign = 2 for runs staged at their global misalignment).
template <GgmlType T, int MaxAlign = 16>
LATTE_HD_INLINE Unit32 decode_codes(const uint8_t* blocks, int unit) {
  using Tr = BlockTraits<T>;
  constexpr int A = capped_alignment(block_alignment<T>, MaxAlign);
  constexpr int units_per_block = Tr::values / 32;
  const uint8_t* b = blocks + static_cast<int64_t>(unit / units_per_block) * Tr::bytes;
  const int u = unit % units_per_block;
  Unit32 r;
  if constexpr (T == GgmlType::q4_0 || T == GgmlType::q4_1) {
    // Q4_0: {d, qs[16]}; Q4_1: {d, m, qs[16]}; qs[j] low nibble = value j, high nibble = value j+16
    constexpr int qs = T == GgmlType::q4_0 ? 2 : 4;
    uint32_t w[4];
    load_words4<capped_alignment((qs % 4 == 0 && A >= 4) ? 4 : 2, A)>(b + qs, w);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      r.codes[i] = w[i] & 0x0F0F0F0Fu;
      r.codes[4 + i] = (w[i] >> 4) & 0x0F0F0F0Fu;
    }
    const float d = half_bits_to_float(load_u16<capped_alignment(2, A)>(b));
    const float off = T == GgmlType::q4_0 ? 8.0f * d : -half_bits_to_float(load_u16<capped_alignment(2, A)>(b + 2));
    r.scale[0] = r.scale[1] = d;
    r.offset[0] = r.offset[1] = off;
  } else if constexpr (T == GgmlType::q5_0 || T == GgmlType::q5_1) {
    // Q5_0: {d, qh[4], qs[16]}; Q5_1: {d, m, qh[4], qs[16]}; bit j of qh is the 5th bit of value j
    constexpr int qh = T == GgmlType::q5_0 ? 2 : 4;
    constexpr int qs = qh + 4;
    const uint32_t high = load_u32<capped_alignment((qh % 4 == 0 && A >= 4) ? 4 : 2, A)>(b + qh);
    uint32_t w[4];
    load_words4<capped_alignment((qs % 8 == 0 && A >= 8) ? 8 : 2, A)>(b + qs, w);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      r.codes[i] = (w[i] & 0x0F0F0F0Fu) | (spread_nibble_to_bytes(high >> (4 * i)) << 4);
      r.codes[4 + i] = ((w[i] >> 4) & 0x0F0F0F0Fu) | (spread_nibble_to_bytes(high >> (16 + 4 * i)) << 4);
    }
    const float d = half_bits_to_float(load_u16<capped_alignment(2, A)>(b));
    const float off = T == GgmlType::q5_0 ? 16.0f * d : -half_bits_to_float(load_u16<capped_alignment(2, A)>(b + 2));
    r.scale[0] = r.scale[1] = d;
    r.offset[0] = r.offset[1] = off;
  } else if constexpr (T == GgmlType::q8_0) {
    // {d, qs[32] int8}: code = q + 128
    uint32_t w[8];
    load_words8<capped_alignment(2, A)>(b + 2, w);
#pragma unroll
    for (int i = 0; i < 8; ++i) r.codes[i] = w[i] ^ 0x80808080u;
    const float d = half_bits_to_float(load_u16<capped_alignment(2, A)>(b));
    r.scale[0] = r.scale[1] = d;
    r.offset[0] = r.offset[1] = 128.0f * d;
  } else if constexpr (T == GgmlType::mxfp4) {
    // {e, qs[16]}: low nibble of qs[j] = value j, high nibble = value j+16
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t lo = 0, hi = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t byte = b[1 + 4 * i + k];
        lo |= mxfp4_code(byte & 0xFu) << (8 * k);
        hi |= mxfp4_code(byte >> 4) << (8 * k);
      }
      r.codes[i] = lo;
      r.codes[4 + i] = hi;
    }
    const float d = mxfp4_scale(b[0]);
    r.scale[0] = r.scale[1] = d;
    r.offset[0] = r.offset[1] = 12.0f * d;
  } else if constexpr (T == GgmlType::iq4_nl || T == GgmlType::iq4_xs) {
    // IQ4_NL {d, qs[16]}; IQ4_XS {d, scales_h, scales_l[4], qs[128]}, unit u's codes in qs[16u .. 16u + 16); the
    // nibbles as Q4_0's, each through k_iq4_levels (code = level + 128); IQ4_XS scales d (ls - 32) as ggml rounds it
    constexpr int qs = T == GgmlType::iq4_nl ? 2 : 8;
    uint32_t w[4];
    load_words4<capped_alignment(qs % 8 == 0 ? 8 : 2, A)>(b + qs + (T == GgmlType::iq4_xs ? 16 * u : 0), w);
    iq4_unit_codes(w, r.codes);
    float d = half_bits_to_float(load_u16<capped_alignment(2, A)>(b));
    if constexpr (T == GgmlType::iq4_xs) {
      d *= static_cast<float>(iq4xs_scale_factor(load_u16<capped_alignment(2, A)>(b + 2), b[4 + u / 2], u));
    }
    r.scale[0] = r.scale[1] = d;
    r.offset[0] = r.offset[1] = 128.0f * d;
  } else if constexpr (T == GgmlType::q2_k) {
    // {scales[16], qs[64], d, dmin}; unit u: half n = u/4, shift 2*(u%4) over qs[32n .. 32n+32)
    const int n = u / 4, j = u % 4;
    uint32_t w[8];
    load_words8<capped_alignment(4, A)>(b + 16 + 32 * n, w);
#pragma unroll
    for (int i = 0; i < 8; ++i) r.codes[i] = (w[i] >> (2 * j)) & 0x03030303u;
    const float d = half_bits_to_float(load_u16<capped_alignment(4, A)>(b + 80));
    const float dmin = half_bits_to_float(load_u16<capped_alignment(2, A)>(b + 82));
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int sc = b[8 * n + 2 * j + s];
      r.scale[s] = d * static_cast<float>(sc & 0xF);
      r.offset[s] = dmin * static_cast<float>(sc >> 4);
    }
  } else if constexpr (T == GgmlType::q3_k) {
    // {hmask[32], qs[64], scales[12], d}; low 2 bits from qs[32n + l] >> 2j, 3rd bit = bit u of hmask[l]
    const int n = u / 4, j = u % 4;
    uint32_t w[8], h[8];
    load_words8<capped_alignment(2, A)>(b + 32 + 32 * n, w);
    load_words8<capped_alignment(2, A)>(b, h);
#pragma unroll
    for (int i = 0; i < 8; ++i) r.codes[i] = ((w[i] >> (2 * j)) & 0x03030303u) | (((h[i] >> u) & 0x01010101u) << 2);
    const float d = half_bits_to_float(load_u16<capped_alignment(2, A)>(b + 108));
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      r.scale[s] = d * static_cast<float>(q3k_scale(b + 96, 2 * u + s));
      r.offset[s] = 4.0f * r.scale[s];
    }
  } else if constexpr (T == GgmlType::q4_k || T == GgmlType::q5_k) {
    // Q4_K {d, dmin, scales[12], qs[128]}; Q5_K {d, dmin, scales[12], qh[32], qs[128]}.
    // Unit u: qs bytes [32*(u/2), +32), nibble u%2; Q5_K's 5th bit is bit u of qh[l].
    constexpr int qs = T == GgmlType::q4_k ? 16 : 48;
    uint32_t w[8];
    load_words8<A>(b + qs + 32 * (u / 2), w);
    const int shift = 4 * (u % 2);
#pragma unroll
    for (int i = 0; i < 8; ++i) r.codes[i] = (w[i] >> shift) & 0x0F0F0F0Fu;
    if constexpr (T == GgmlType::q5_k) {
      uint32_t h[8];
      load_words8<A>(b + 16, h);
#pragma unroll
      for (int i = 0; i < 8; ++i) r.codes[i] |= ((h[i] >> u) & 0x01010101u) << 4;
    }
    int sc = 0, m = 0;
    k4_scale_min(b + 4, u, sc, m);
    const float d = half_bits_to_float(load_u16<A>(b));
    const float dmin = half_bits_to_float(load_u16<capped_alignment(2, A)>(b + 2));
    r.scale[0] = r.scale[1] = d * static_cast<float>(sc);
    r.offset[0] = r.offset[1] = dmin * static_cast<float>(m);
  } else if constexpr (T == GgmlType::q6_k) {
    // {ql[128], qh[64], scales[16] int8, d}; unit u: half n = u/4, quarter q = u%4:
    // low 4 bits from ql[64n + 32(q%2) + l] >> 4(q/2), high 2 bits from qh[32n + l] >> 2q
    const int n = u / 4, q = u % 4;
    uint32_t w[8], h[8];
    load_words8<capped_alignment(2, A)>(b + 64 * n + 32 * (q % 2), w);
    load_words8<capped_alignment(2, A)>(b + 128 + 32 * n, h);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      r.codes[i] = ((w[i] >> (4 * (q / 2))) & 0x0F0F0F0Fu) | (((h[i] >> (2 * q)) & 0x03030303u) << 4);
    }
    const float d = half_bits_to_float(load_u16<capped_alignment(2, A)>(b + 208));
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      r.scale[s] = d * static_cast<float>(static_cast<int8_t>(b[192 + 8 * n + 2 * q + s]));
      r.offset[s] = 32.0f * r.scale[s];
    }
  } else {
    static_assert(BlockTraits<T>::is_float, "decode_codes: unsupported type");
  }
  return r;
}

/// The 32 values of unit `unit` of a float-typed row run starting at `row` (16-byte aligned).
template <GgmlType T>
LATTE_HD_INLINE void decode_floats(const uint8_t* row, int unit, float (&v)[32]) {
  const uint8_t* p = row + static_cast<int64_t>(unit) * BlockTraits<T>::bytes;
  if constexpr (T == GgmlType::f32) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float4 f = reinterpret_cast<const float4*>(p)[i];
      v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint4 q = reinterpret_cast<const uint4*>(p)[i];
      const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if constexpr (T == GgmlType::f16) {
          v[8 * i + 2 * k] = half_bits_to_float(words[k] & 0xFFFFu);
          v[8 * i + 2 * k + 1] = half_bits_to_float(words[k] >> 16);
        } else {
          v[8 * i + 2 * k] = bf16_bits_to_float(words[k] & 0xFFFFu);
          v[8 * i + 2 * k + 1] = bf16_bits_to_float(words[k] >> 16);
        }
      }
    }
  }
}

/// The 32 dequantized values of unit `unit`, any type (as dequantize_row would produce them, up to
/// one rounding: scale*code - offset is one fused multiply-add).
template <GgmlType T, int MaxAlign = 16>
LATTE_HD_INLINE void decode_values(const uint8_t* blocks, int unit, float (&v)[32]) {
  if constexpr (BlockTraits<T>::is_float) {
    decode_floats<T>(blocks, unit, v);
  } else {
    const Unit32 u = decode_codes<T, MaxAlign>(blocks, unit);
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = fmaf(u.scale[i / 16], code_value(u.codes[i / 4], i % 4), -u.offset[i / 16]);
  }
}

}  // namespace latte::cuda::quant
