// ggml tensor element types and block formats: sizes, dequantization and reference quantization,
// bit-compatible with ggml (a Q4_K block is 256 values in 144 bytes, exactly as llama.cpp lays it out).
//
//   std::vector<std::byte> q(latte::row_bytes(latte::GgmlType::q4_K, n));      // n: a multiple of 256
//   latte::quantize_row(latte::GgmlType::q4_K, x.data(), q.data(), n);  // dequantize_row decodes it back
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace latte {

/// ggml's type ids, as stored in GGUF tensor infos. Values are fixed by the file format.
enum class GgmlType : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  // 4 and 5 were Q4_2 / Q4_3, removed from ggml: files using them are rejected.
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  // 31..33 were Q4_0_4_4 / Q4_0_4_8 / Q4_0_8_8, removed.
  tq1_0 = 34,
  tq2_0 = 35,
  // 36..38 were IQ4_NL_4_4 / _4_8 / _8_8, removed.
  mxfp4 = 39,
  nvfp4 = 40,  ///< 4 x 16 E2M1 values with UE4M3 scales
  q1_0 = 41,   ///< 128 sign bits and one fp16 scale
  q2_0 = 42,   ///< 64 2-bit values {-1, 0, 1, 2} and one fp16 scale
};

/// Static facts about one type.
struct TypeTraits {
  std::string_view name;  ///< ggml's name: "f32", "q4_K", ...
  uint32_t block_values;  ///< values per block (1 for plain types; 32, 64, 128 or 256 for quantized ones)
  uint32_t block_bytes;   ///< bytes per block
  bool dequantizable;     ///< latte can turn it into floats (dequantize_row accepts it)
  bool quantizable;       ///< latte has ggml's reference quantizer for it (quantize_row accepts it)
};

/// Traits of a type id read from a file. Throws Error(invalid_file) for ids that ggml never defined
/// or has removed (4, 5, 31..33, 36..38, and anything above 42); known-but-unsupported types (the IQ
/// and TQ families) return traits with dequantizable == false.
const TypeTraits& type_traits(GgmlType type);

/// Traits lookup that never throws: nullopt for unknown or removed ids.
std::optional<TypeTraits> find_type_traits(uint32_t raw_type_id) noexcept;

/// Parses a ggml type name ("q4_K", "Q4_K", "q8_0", "bf16"). Throws Error(invalid_argument).
GgmlType parse_type_name(std::string_view name);

/// ggml's name of a type ("q4_K"); "unknown" for ids type_traits would reject. Never throws.
std::string_view type_name(GgmlType type) noexcept;

/// Bytes taken by `n_values` consecutive values of `type`. Throws Error(invalid_argument) when
/// n_values is not a multiple of the block size, or when the byte count overflows 64 bits.
uint64_t row_bytes(GgmlType type, uint64_t n_values);

/// Decodes `n` values (a multiple of the block size) from `src` into `dst`, bit for bit as ggml's
/// dequantize_row_* (Q8_1: d * q; integer and f64 types: converted to the nearest float). `src` needs no
/// particular alignment. Throws Error(unsupported) for types that cannot be dequantized and
/// Error(invalid_argument) when n is negative or not a multiple of the block size.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

/// Decodes a matrix of `n_rows` contiguous rows of `n_cols` values each into `dst` (n_rows x n_cols
/// floats, row-major). Same rules and errors as dequantize_row, applied to n_cols.
void dequantize_rows(GgmlType type, const void* src, float* dst, int64_t n_rows, int64_t n_cols);

/// Dot product of one encoded row of `n` values with `x` (n floats), decoding block by block into a
/// small buffer: no full-row temporary. Each value is decoded exactly as dequantize_row does; the sum
/// is accumulated in float in chunks (not bit-identical to a sequential sum). Same errors as
/// dequantize_row.
float dot_row(GgmlType type, const void* row, const float* x, int64_t n);

/// Encodes `n` floats (a multiple of the block size) with ggml's reference quantizer for `type`
/// (quantize_row_*_ref, which is also what ggml's quantize_* does without an importance matrix): the
/// same bytes as ggml on the same input. Throws Error(unsupported) when the type has no quantizer,
/// Error(invalid_argument) when n is negative or not a multiple of the block size, or when a value
/// is NaN or infinite for a quantized (non-float) type.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

/// IEEE half conversions as ggml does them: exact widening; narrowing rounds to nearest even,
/// overflows to infinity, keeps subnormals, and turns every NaN into the quiet NaN 0x7E00 (with sign).
float fp16_to_fp32(uint16_t h) noexcept;
uint16_t fp32_to_fp16(float f) noexcept;
/// bfloat16 conversions as ggml does them: narrowing rounds to nearest even (no flush of subnormals)
/// and quiets NaNs by setting bit 6 of the result.
float bf16_to_fp32(uint16_t h) noexcept;
uint16_t fp32_to_bf16(float f) noexcept;

}  // namespace latte
