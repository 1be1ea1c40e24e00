// Per-type block codecs behind latte::dequantize_row / quantize_row. Each decoder turns `n_blocks`
// consecutive blocks (bytes, any alignment) into n_blocks * block_values floats; each encoder does the
// reverse with ggml's reference quantizer. Callers (rows.cpp) have already checked the type and sizes.
//
//   const latte::quant::RowCodec& c = latte::quant::row_codec(latte::GgmlType::q4_K);
//   c.decode(bytes, floats, n / 256);
#pragma once

#include <latte/quant.hpp>

#include <cstdint>

// Decoders are compiled for the baseline ISA and again for AVX2 (picked once at load time through an
// ifunc) so the same portable loops run with wide vectors where the CPU has them (an AVX-512 clone
// measured no faster). None of
// these targets enables FMA (and quant sources build with -ffp-contract=off), so every clone does the
// same float operations and produces the same bits.
#if defined(__x86_64__) && defined(__ELF__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(LATTE_NO_TARGET_CLONES)
#define LATTE_DECODER_CLONES [[gnu::target_clones("avx2", "default")]]
#else
#define LATTE_DECODER_CLONES
#endif

namespace latte::quant {

/// Decodes n_blocks blocks at `src` into `dst`.
using DecodeBlocks = void (*)(const uint8_t* src, float* dst, int64_t n_blocks);
/// Encodes n_blocks blocks' worth of floats at `src` into `dst`.
using EncodeBlocks = void (*)(const float* src, uint8_t* dst, int64_t n_blocks);

/// The codec of one type; a null member means the direction is not supported.
struct RowCodec {
  DecodeBlocks decode = nullptr;
  EncodeBlocks encode = nullptr;
};

/// The codec of `type` (both members null for types latte cannot handle).
const RowCodec& row_codec(GgmlType type) noexcept;

/// Lanes of dot_row's float accumulator.
inline constexpr int k_accumulator_lanes = 16;

/// partial[i % 16] += a[i] * b[i] for i < n, in index order within each lane.
void multiply_accumulate(const float* a, const float* b, int64_t n, float partial[k_accumulator_lanes]);

// Plain element types (block = one value). decode_float.cpp / encode_float.cpp
void decode_f32(const uint8_t* src, float* dst, int64_t n);
void decode_f16(const uint8_t* src, float* dst, int64_t n);
void decode_bf16(const uint8_t* src, float* dst, int64_t n);
void decode_f64(const uint8_t* src, float* dst, int64_t n);
void decode_i8(const uint8_t* src, float* dst, int64_t n);
void decode_i16(const uint8_t* src, float* dst, int64_t n);
void decode_i32(const uint8_t* src, float* dst, int64_t n);
void decode_i64(const uint8_t* src, float* dst, int64_t n);
void encode_f32(const float* src, uint8_t* dst, int64_t n);
void encode_f16(const float* src, uint8_t* dst, int64_t n);
void encode_bf16(const float* src, uint8_t* dst, int64_t n);

// Blocks of 32..128 values with one or two scales. decode_small_blocks.cpp / encode_small_blocks.cpp
void decode_q4_0(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q4_1(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q5_0(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q5_1(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q8_0(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q8_1(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_mxfp4(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_nvfp4(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q1_0(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q2_0(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_iq4_nl(const uint8_t* src, float* dst, int64_t n_blocks);
void encode_q4_0(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q4_1(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q5_0(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q5_1(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q8_0(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q8_1(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_mxfp4(const float* src, uint8_t* dst, int64_t n_blocks);

// K-quant super-blocks of 256 values. decode_kquants.cpp / encode_kquants.cpp
void decode_q2_k(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q3_k(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q4_k(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q5_k(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q6_k(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q8_k(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_iq4_xs(const uint8_t* src, float* dst, int64_t n_blocks);

// IQ4_NL / IQ4_XS encoders (ggml's reference choices). encode_iq4.cpp
void encode_iq4_nl(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_iq4_xs(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q2_k(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q3_k(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q4_k(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q5_k(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q6_k(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q8_k(const float* src, uint8_t* dst, int64_t n_blocks);

}  // namespace latte::quant
