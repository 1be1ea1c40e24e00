// latte::dequantize_row / dequantize_rows / dot_row / quantize_row: argument checks, then dispatch to
// the per-type block codecs (row_codecs.hpp).
#include <latte/error.hpp>
#include <latte/quant.hpp>

#include "quant/row_codecs.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <string>

namespace latte {
namespace quant {
namespace {

constexpr size_t k_codec_count = 43;  // type ids 0..42

constexpr std::array<RowCodec, k_codec_count> k_codecs = [] {
  std::array<RowCodec, k_codec_count> c{};
  c[0] = {decode_f32, encode_f32};
  c[1] = {decode_f16, encode_f16};
  c[2] = {decode_q4_0, encode_q4_0};
  c[3] = {decode_q4_1, encode_q4_1};
  c[6] = {decode_q5_0, encode_q5_0};
  c[7] = {decode_q5_1, encode_q5_1};
  c[8] = {decode_q8_0, encode_q8_0};
  c[9] = {decode_q8_1, encode_q8_1};
  c[10] = {decode_q2_k, encode_q2_k};
  c[11] = {decode_q3_k, encode_q3_k};
  c[12] = {decode_q4_k, encode_q4_k};
  c[13] = {decode_q5_k, encode_q5_k};
  c[14] = {decode_q6_k, encode_q6_k};
  c[15] = {decode_q8_k, encode_q8_k};
  c[20] = {decode_iq4_nl, encode_iq4_nl};
  c[23] = {decode_iq4_xs, encode_iq4_xs};
  c[24] = {decode_i8, nullptr};
  c[25] = {decode_i16, nullptr};
  c[26] = {decode_i32, nullptr};
  c[27] = {decode_i64, nullptr};
  c[28] = {decode_f64, nullptr};
  c[30] = {decode_bf16, encode_bf16};
  c[39] = {decode_mxfp4, encode_mxfp4};
  c[40] = {decode_nvfp4, nullptr};
  c[41] = {decode_q1_0, nullptr};
  c[42] = {decode_q2_0, nullptr};
  return c;
}();

}  // namespace

LATTE_DECODER_CLONES void multiply_accumulate(const float* a, const float* b, int64_t n,
                                              float partial[k_accumulator_lanes]) {
  float acc[k_accumulator_lanes];  // a local copy: `partial` might alias a or b, acc stays in registers
  for (int l = 0; l < k_accumulator_lanes; ++l) acc[l] = partial[l];
  int64_t i = 0;
  for (; i + k_accumulator_lanes <= n; i += k_accumulator_lanes) {
    for (int l = 0; l < k_accumulator_lanes; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (; i < n; ++i) acc[i % k_accumulator_lanes] += a[i] * b[i];
  for (int l = 0; l < k_accumulator_lanes; ++l) partial[l] = acc[l];
}

const RowCodec& row_codec(GgmlType type) noexcept {
  static constexpr RowCodec none{};
  const auto id = static_cast<size_t>(type);
  return id < k_codec_count ? k_codecs[id] : none;
}

}  // namespace quant

namespace {

std::string describe(const TypeTraits& t, GgmlType type) {
  return std::string(t.name) + " (type " + std::to_string(static_cast<uint32_t>(type)) + ")";
}

// Checks n and returns the number of blocks.
int64_t block_count(const char* what, GgmlType type, const TypeTraits& t, int64_t n) {
  if (n < 0)
    throw Error(ErrorCode::invalid_argument, std::string(what) + ": negative value count " + std::to_string(n));
  if (n % t.block_values != 0) {
    throw Error(ErrorCode::invalid_argument, std::string(what) + ": " + std::to_string(n) + " values of " +
                                                 describe(t, type) + " are not a whole number of blocks of " +
                                                 std::to_string(t.block_values));
  }
  return n / t.block_values;
}

quant::DecodeBlocks decoder_for(const char* what, GgmlType type, const TypeTraits& t) {
  const quant::DecodeBlocks decode = quant::row_codec(type).decode;
  if (!decode) throw Error(ErrorCode::unsupported, std::string(what) + ": cannot dequantize " + describe(t, type));
  return decode;
}

}  // namespace

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  const TypeTraits& t = type_traits(type);
  const quant::DecodeBlocks decode = decoder_for("dequantize_row", type, t);
  const int64_t blocks = block_count("dequantize_row", type, t, n);
  if (blocks == 0) return;
  decode(static_cast<const uint8_t*>(src), dst, blocks);
}

void dequantize_rows(GgmlType type, const void* src, float* dst, int64_t n_rows, int64_t n_cols) {
  const TypeTraits& t = type_traits(type);
  const quant::DecodeBlocks decode = decoder_for("dequantize_rows", type, t);
  const int64_t blocks_per_row = block_count("dequantize_rows", type, t, n_cols);
  if (n_rows < 0) {
    throw Error(ErrorCode::invalid_argument, "dequantize_rows: negative row count " + std::to_string(n_rows));
  }
  // Rows are contiguous and a whole number of blocks, so the matrix is one long run of blocks.
  if (n_rows == 0 || blocks_per_row == 0) return;
  if (blocks_per_row > INT64_MAX / n_rows) {
    throw Error(ErrorCode::invalid_argument,
                "dequantize_rows: " + std::to_string(n_rows) + " x " + std::to_string(n_cols) + " values overflow");
  }
  decode(static_cast<const uint8_t*>(src), dst, blocks_per_row * n_rows);
}

float dot_row(GgmlType type, const void* row, const float* x, int64_t n) {
  const TypeTraits& t = type_traits(type);
  const quant::DecodeBlocks decode = decoder_for("dot_row", type, t);
  const int64_t blocks = block_count("dot_row", type, t, n);
  // Decode a chunk of whole blocks into a buffer that stays in L1, then multiply-accumulate it into
  // 16 independent partial sums (vectorizable without reassociation flags).
  constexpr int64_t k_chunk_values = 1024;  // floats; a multiple of every block size (1..256)
  alignas(64) float chunk[k_chunk_values];
  float partial[quant::k_accumulator_lanes] = {};
  const int64_t blocks_per_chunk = k_chunk_values / t.block_values;
  const auto* bytes = static_cast<const uint8_t*>(row);
  for (int64_t b = 0; b < blocks; b += blocks_per_chunk) {
    const int64_t nb = blocks - b < blocks_per_chunk ? blocks - b : blocks_per_chunk;
    decode(bytes + b * static_cast<int64_t>(t.block_bytes), chunk, nb);
    const int64_t values = nb * t.block_values;
    quant::multiply_accumulate(chunk, x + b * t.block_values, values, partial);
  }
  float sum = 0.0f;
  for (float p : partial) sum += p;
  return sum;
}

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  const TypeTraits& t = type_traits(type);
  const quant::EncodeBlocks encode = quant::row_codec(type).encode;
  if (!encode) throw Error(ErrorCode::unsupported, "quantize_row: no quantizer for " + describe(t, type));
  const int64_t blocks = block_count("quantize_row", type, t, n);
  const bool is_float_type = type == GgmlType::f32 || type == GgmlType::f16 || type == GgmlType::bf16;
  if (!is_float_type) {
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(src[i])) {
        throw Error(ErrorCode::invalid_argument, "quantize_row: value " + std::to_string(i) + " (" +
                                                     std::to_string(src[i]) + ") cannot be encoded as " +
                                                     describe(t, type));
      }
    }
  }
  if (blocks == 0) return;
  encode(src, static_cast<uint8_t*>(dst), blocks);
}

}  // namespace latte
