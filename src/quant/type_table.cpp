// ggml's type table: names, block sizes and byte sizes of every type id a GGUF file may carry, and
// which of them latte can decode and encode. Ids ggml removed (4, 5, 31..33, 36..38) or never
// defined are rejected.
#include <latte/error.hpp>
#include <latte/quant.hpp>
#include <latte/quant_blocks.hpp>

#include "quant/half_float.hpp"

#include <array>
#include <cctype>
#include <cstdint>
#include <string>

namespace latte {
namespace {

constexpr uint32_t k_type_count = 43;  // ids 0..42; see GgmlType

// Types latte decodes and encodes.
constexpr TypeTraits codec(std::string_view name, uint32_t block_values, uint32_t block_bytes) {
  return {.name = name,
          .block_values = block_values,
          .block_bytes = block_bytes,
          .dequantizable = true,
          .quantizable = true};
}
// Types latte decodes but has no reference quantizer for.
constexpr TypeTraits decoder(std::string_view name, uint32_t block_values, uint32_t block_bytes) {
  return {.name = name,
          .block_values = block_values,
          .block_bytes = block_bytes,
          .dequantizable = true,
          .quantizable = false};
}
// Known ids whose layout latte can size but not decode (the grid-based IQ types and the TQ family).
constexpr TypeTraits opaque(std::string_view name, uint32_t block_values, uint32_t block_bytes) {
  return {.name = name,
          .block_values = block_values,
          .block_bytes = block_bytes,
          .dequantizable = false,
          .quantizable = false};
}

// Indexed by type id; an empty name marks an id that is not (or no longer) a ggml type.
constexpr std::array<TypeTraits, k_type_count> k_types = [] {
  std::array<TypeTraits, k_type_count> t{};
  t[0] = codec("f32", 1, 4);
  t[1] = codec("f16", 1, 2);
  t[2] = codec("q4_0", qk4_0, sizeof(BlockQ4_0));
  t[3] = codec("q4_1", qk4_0, sizeof(BlockQ4_1));
  t[6] = codec("q5_0", qk5_0, sizeof(BlockQ5_0));
  t[7] = codec("q5_1", qk5_0, sizeof(BlockQ5_1));
  t[8] = codec("q8_0", qk8_0, sizeof(BlockQ8_0));
  t[9] = codec("q8_1", qk8_0, sizeof(BlockQ8_1));
  t[10] = codec("q2_K", qk_k, sizeof(BlockQ2K));
  t[11] = codec("q3_K", qk_k, sizeof(BlockQ3K));
  t[12] = codec("q4_K", qk_k, sizeof(BlockQ4K));
  t[13] = codec("q5_K", qk_k, sizeof(BlockQ5K));
  t[14] = codec("q6_K", qk_k, sizeof(BlockQ6K));
  t[15] = codec("q8_K", qk_k, sizeof(BlockQ8K));
  t[16] = opaque("iq2_xxs", qk_k, 66);
  t[17] = opaque("iq2_xs", qk_k, 74);
  t[18] = opaque("iq3_xxs", qk_k, 98);
  t[19] = opaque("iq1_s", qk_k, 50);
  t[20] = codec("iq4_nl", qk4_0, sizeof(BlockIq4Nl));
  t[21] = opaque("iq3_s", qk_k, 110);
  t[22] = opaque("iq2_s", qk_k, 82);
  t[23] = codec("iq4_xs", qk_k, sizeof(BlockIq4Xs));
  t[24] = decoder("i8", 1, 1);
  t[25] = decoder("i16", 1, 2);
  t[26] = decoder("i32", 1, 4);
  t[27] = decoder("i64", 1, 8);
  t[28] = decoder("f64", 1, 8);
  t[29] = opaque("iq1_m", qk_k, 56);
  t[30] = codec("bf16", 1, 2);
  t[34] = opaque("tq1_0", qk_k, 54);
  t[35] = opaque("tq2_0", qk_k, 66);
  t[39] = codec("mxfp4", qk_mxfp4, sizeof(BlockMxfp4));
  t[40] = decoder("nvfp4", qk_nvfp4, sizeof(BlockNvfp4));
  t[41] = decoder("q1_0", qk1_0, sizeof(BlockQ1_0));
  t[42] = decoder("q2_0", qk2_0, sizeof(BlockQ2_0));
  return t;
}();

const TypeTraits* lookup(uint32_t id) noexcept {
  if (id >= k_type_count || k_types[id].name.empty()) return nullptr;
  return &k_types[id];
}

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

}  // namespace

const TypeTraits& type_traits(GgmlType type) {
  const auto id = static_cast<uint32_t>(type);
  if (const TypeTraits* t = lookup(id)) return *t;
  const bool removed = id == 4 || id == 5 || (id >= 31 && id <= 33) || (id >= 36 && id <= 38);
  throw Error(ErrorCode::invalid_file, "ggml type id " + std::to_string(id) +
                                           (removed ? " was removed from ggml and is no longer readable"
                                                    : " is not a ggml type (known ids are 0..42)"));
}

std::optional<TypeTraits> find_type_traits(uint32_t raw_type_id) noexcept {
  if (const TypeTraits* t = lookup(raw_type_id)) return *t;
  return std::nullopt;
}

std::string_view type_name(GgmlType type) noexcept {
  const TypeTraits* t = lookup(static_cast<uint32_t>(type));
  return t ? t->name : std::string_view("unknown");
}

GgmlType parse_type_name(std::string_view name) {
  for (uint32_t id = 0; id < k_type_count; ++id) {
    if (!k_types[id].name.empty() && equal_ignoring_case(k_types[id].name, name)) return static_cast<GgmlType>(id);
  }
  throw Error(ErrorCode::invalid_argument, "unknown ggml type name '" + std::string(name) +
                                               "' (expected a name such as f32, f16, bf16, q8_0, q4_K, q6_K)");
}

uint64_t row_bytes(GgmlType type, uint64_t n_values) {
  const TypeTraits& t = type_traits(type);
  if (n_values % t.block_values != 0) {
    throw Error(ErrorCode::invalid_argument, std::to_string(n_values) + " values of type " + std::string(t.name) +
                                                 " are not a whole number of blocks of " +
                                                 std::to_string(t.block_values));
  }
  const uint64_t blocks = n_values / t.block_values;
  if (blocks > UINT64_MAX / t.block_bytes) {
    throw Error(ErrorCode::invalid_argument,
                std::to_string(n_values) + " values of type " + std::string(t.name) + " take more than 2^64 bytes");
  }
  return blocks * t.block_bytes;
}

float fp16_to_fp32(uint16_t h) noexcept { return quant::half_to_float(h); }
uint16_t fp32_to_fp16(float f) noexcept { return quant::float_to_half(f); }
float bf16_to_fp32(uint16_t h) noexcept { return quant::bf16_to_float(h); }
uint16_t fp32_to_bf16(float f) noexcept { return quant::float_to_bf16(f); }

}  // namespace latte
