// ggml's type table: ids, names, block sizes, removed ids, name parsing and row sizes.
#include <doctest/doctest.h>

#include <latte/error.hpp>
#include <latte/quant.hpp>

#include <cstdint>
#include <string>
#include <vector>

using latte::ErrorCode;
using latte::GgmlType;

namespace {

struct Expected {
  uint32_t id;
  const char* name;
  uint32_t block_values;
  uint32_t block_bytes;
  bool dequantizable;
  bool quantizable;
};

// Sizes from the format definitions (ggml-common.h), written out independently of the table.
const std::vector<Expected> k_expected = {
    {0, "f32", 1, 4, true, true},           {1, "f16", 1, 2, true, true},
    {2, "q4_0", 32, 18, true, true},        {3, "q4_1", 32, 20, true, true},
    {6, "q5_0", 32, 22, true, true},        {7, "q5_1", 32, 24, true, true},
    {8, "q8_0", 32, 34, true, true},        {9, "q8_1", 32, 36, true, true},
    {10, "q2_K", 256, 84, true, true},      {11, "q3_K", 256, 110, true, true},
    {12, "q4_K", 256, 144, true, true},     {13, "q5_K", 256, 176, true, true},
    {14, "q6_K", 256, 210, true, true},     {15, "q8_K", 256, 292, true, true},
    {16, "iq2_xxs", 256, 66, false, false}, {17, "iq2_xs", 256, 74, false, false},
    {18, "iq3_xxs", 256, 98, false, false}, {19, "iq1_s", 256, 50, false, false},
    {20, "iq4_nl", 32, 18, true, true},     {21, "iq3_s", 256, 110, false, false},
    {22, "iq2_s", 256, 82, false, false},   {23, "iq4_xs", 256, 136, true, true},
    {24, "i8", 1, 1, true, false},          {25, "i16", 1, 2, true, false},
    {26, "i32", 1, 4, true, false},         {27, "i64", 1, 8, true, false},
    {28, "f64", 1, 8, true, false},         {29, "iq1_m", 256, 56, false, false},
    {30, "bf16", 1, 2, true, true},         {34, "tq1_0", 256, 54, false, false},
    {35, "tq2_0", 256, 66, false, false},   {39, "mxfp4", 32, 17, true, true},
    {40, "nvfp4", 64, 36, true, false},     {41, "q1_0", 128, 18, true, false},
    {42, "q2_0", 64, 18, true, false},
};

}  // namespace

TEST_CASE("type table matches ggml's ids, names and block sizes") {
  for (const Expected& e : k_expected) {
    const std::string name = e.name;
    CAPTURE(name);
    const latte::TypeTraits& t = latte::type_traits(static_cast<GgmlType>(e.id));
    CHECK(t.name == e.name);
    CHECK(t.block_values == e.block_values);
    CHECK(t.block_bytes == e.block_bytes);
    CHECK(t.dequantizable == e.dequantizable);
    CHECK(t.quantizable == e.quantizable);
    const auto found = latte::find_type_traits(e.id);
    REQUIRE(found.has_value());
    CHECK(found->name == e.name);
    CHECK(latte::type_name(static_cast<GgmlType>(e.id)) == e.name);
  }
}

TEST_CASE("removed and undefined type ids are rejected as invalid files") {
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 43u, 44u, 100u, 0xffffffffu}) {
    CAPTURE(id);
    CHECK_FALSE(latte::find_type_traits(id).has_value());
    CHECK(latte::type_name(static_cast<GgmlType>(id)) == "unknown");
    try {
      (void)latte::type_traits(static_cast<GgmlType>(id));
      FAIL("type_traits accepted a removed or undefined id");
    } catch (const latte::Error& e) {
      CHECK(e.code() == ErrorCode::invalid_file);
      CHECK(std::string(e.what()).find(std::to_string(id)) != std::string::npos);
    }
    CHECK_THROWS_AS((void)latte::row_bytes(static_cast<GgmlType>(id), 32), latte::Error);
  }
}

TEST_CASE("every known id is found, and nothing else in 0..255") {
  int known = 0;
  for (uint32_t id = 0; id < 256; ++id) known += latte::find_type_traits(id).has_value() ? 1 : 0;
  CHECK(known == static_cast<int>(k_expected.size()));
}

TEST_CASE("parse_type_name round-trips every name in any case") {
  for (const Expected& e : k_expected) {
    const std::string name = e.name;
    CAPTURE(name);
    CHECK(static_cast<uint32_t>(latte::parse_type_name(e.name)) == e.id);
    std::string upper = e.name;
    for (char& c : upper) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
    CHECK(static_cast<uint32_t>(latte::parse_type_name(upper)) == e.id);
  }
  CHECK(latte::parse_type_name("q4_k") == GgmlType::q4_k);
  CHECK(latte::parse_type_name("Q6_K") == GgmlType::q6_k);
}

TEST_CASE("parse_type_name rejects unknown names") {
  for (const char* bad : {"", "q4", "q4_2", "q4_0_4_4", "float32", "q4_K ", " f16", "fp16"}) {
    CAPTURE(bad);
    try {
      (void)latte::parse_type_name(bad);
      FAIL("accepted an unknown name");
    } catch (const latte::Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
    }
  }
}

TEST_CASE("row_bytes counts whole blocks") {
  CHECK(latte::row_bytes(GgmlType::f32, 7) == 28);
  CHECK(latte::row_bytes(GgmlType::f16, 3) == 6);
  CHECK(latte::row_bytes(GgmlType::q8_0, 64) == 68);
  CHECK(latte::row_bytes(GgmlType::q4_k, 7168) == 28 * 144);
  CHECK(latte::row_bytes(GgmlType::q6_k, 0) == 0);
  CHECK(latte::row_bytes(GgmlType::mxfp4, 2880) == 90 * 17);
  CHECK(latte::row_bytes(GgmlType::iq2_xxs, 512) == 132);  // sizes known even when not decodable
}

TEST_CASE("row_bytes rejects partial blocks") {
  for (auto [type, n] : {std::pair{GgmlType::q4_k, uint64_t{255}}, std::pair{GgmlType::q4_k, uint64_t{257}},
                         std::pair{GgmlType::q8_0, uint64_t{48}}, std::pair{GgmlType::q4_0, uint64_t{1}},
                         std::pair{GgmlType::nvfp4, uint64_t{32}}, std::pair{GgmlType::q1_0, uint64_t{64}}}) {
    CAPTURE(n);
    try {
      (void)latte::row_bytes(type, n);
      FAIL("accepted a partial block");
    } catch (const latte::Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
      CHECK(std::string(e.what()).find(std::to_string(n)) != std::string::npos);
    }
  }
}

TEST_CASE("row_bytes rejects byte counts that overflow 64 bits") {
  try {
    (void)latte::row_bytes(GgmlType::f32, UINT64_MAX / 2);
    FAIL("accepted an overflowing size");
  } catch (const latte::Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
  }
  CHECK_THROWS_AS((void)latte::row_bytes(GgmlType::f64, UINT64_MAX / 4), latte::Error);
  CHECK(latte::row_bytes(GgmlType::i8, UINT64_MAX) == UINT64_MAX);  // 1 byte per value: fits exactly
}
