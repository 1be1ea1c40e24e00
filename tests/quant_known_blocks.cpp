// Hand-built blocks with known values: the bytes are written from the format definitions in
// latte/quant_blocks.hpp (ggml's layouts) and the expected floats are stated literally, so these
// tests do not depend on the decoder under test. Also pins the reference quantizers' exact bytes
// on small inputs whose ggml result can be worked out by hand.
#include <doctest/doctest.h>

#include <latte/error.hpp>
#include <latte/quant.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

using latte::GgmlType;

namespace {

using Bytes = std::vector<uint8_t>;

void put_u16(Bytes& b, uint16_t v) {
  b.push_back(static_cast<uint8_t>(v & 0xff));
  b.push_back(static_cast<uint8_t>(v >> 8));
}
void put_u32(Bytes& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_bytes(Bytes& b, std::initializer_list<int> values) {
  for (int v : values) b.push_back(static_cast<uint8_t>(v));
}
void put_repeated(Bytes& b, int count, uint8_t value) { b.insert(b.end(), static_cast<size_t>(count), value); }

std::vector<float> decode(GgmlType type, const Bytes& bytes, int64_t n) {
  REQUIRE(latte::row_bytes(type, static_cast<uint64_t>(n)) == bytes.size());
  // Decode from an odd address: blocks in a file carry no alignment promise.
  std::vector<uint8_t> shifted(bytes.size() + 1);
  std::memcpy(shifted.data() + 1, bytes.data(), bytes.size());
  std::vector<float> out(static_cast<size_t>(n), NAN);
  latte::dequantize_row(type, shifted.data() + 1, out.data(), n);
  return out;
}

// Bitwise comparison (distinguishes -0 from +0).
void check_bits(const std::vector<float>& got, const std::vector<float>& expected) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CAPTURE(got[i]);
    CAPTURE(expected[i]);
    CHECK(std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(expected[i]));
  }
}

Bytes encode(GgmlType type, const std::vector<float>& values) {
  Bytes out(latte::row_bytes(type, values.size()), 0xAA);
  latte::quantize_row(type, values.data(), out.data(), static_cast<int64_t>(values.size()));
  return out;
}

}  // namespace

TEST_CASE("f32, f16 and bf16 rows decode to their literal values") {
  Bytes f32;
  put_u32(f32, 0x3fc00000u);  // 1.5
  put_u32(f32, 0xc0100000u);  // -2.25
  put_u32(f32, 0x80000000u);  // -0
  check_bits(decode(GgmlType::f32, f32, 3), {1.5f, -2.25f, -0.0f});

  Bytes f16;
  for (uint16_t h : {0x3c00, 0xc000, 0x3555, 0x0001, 0x7bff, 0xfc00, 0x8000}) put_u16(f16, h);
  check_bits(decode(GgmlType::f16, f16, 7),
             {1.0f, -2.0f, 0.333251953125f, 5.9604644775390625e-08f, 65504.0f, -INFINITY, -0.0f});

  Bytes bf16;
  for (uint16_t h : {0x3f80, 0xc0a0, 0x3e80, 0x0001}) put_u16(bf16, h);
  check_bits(decode(GgmlType::bf16, bf16, 4), {1.0f, -5.0f, 0.25f, 9.18354961579912e-41f});
}

TEST_CASE("integer and f64 rows decode to the nearest float") {
  Bytes i8;
  put_bytes(i8, {0x7f, 0x80, 0xff, 0x00});
  check_bits(decode(GgmlType::i8, i8, 4), {127.0f, -128.0f, -1.0f, 0.0f});
  Bytes i16;
  put_u16(i16, 0x8000);
  put_u16(i16, 0x1234);
  check_bits(decode(GgmlType::i16, i16, 2), {-32768.0f, 4660.0f});
  Bytes i32;
  put_u32(i32, 0x01000001u);  // 16777217: not a float, rounds to even 16777216
  put_u32(i32, 0xfffffffbu);  // -5
  check_bits(decode(GgmlType::i32, i32, 2), {16777216.0f, -5.0f});
  Bytes i64;
  put_u32(i64, 0x00000000u);
  put_u32(i64, 0x80000000u);  // INT64_MIN = -2^63
  check_bits(decode(GgmlType::i64, i64, 1), {-9223372036854775808.0f});
  Bytes f64;
  put_u32(f64, 0x00000000u);
  put_u32(f64, 0x3ff80000u);  // 1.5
  put_u32(f64, 0x00000000u);
  put_u32(f64, 0xc7f00000u);  // -2^128: beyond float range
  check_bits(decode(GgmlType::f64, f64, 2), {1.5f, -INFINITY});
}

TEST_CASE("q8_0 block decodes to d * q") {
  Bytes b;
  put_u16(b, 0x3800);  // d = 0.5
  put_bytes(b, {1, 0xff, 127, 0x80, 0, 2});
  for (int j = 6; j < 32; ++j) b.push_back(static_cast<uint8_t>(j));  // q = j
  std::vector<float> expected = {0.5f, -0.5f, 63.5f, -64.0f, 0.0f, 1.0f};
  for (int j = 6; j < 32; ++j) expected.push_back(0.5f * static_cast<float>(j));
  check_bits(decode(GgmlType::q8_0, b, 32), expected);
}

TEST_CASE("q8_0 quantizer: d = amax/127 stored as fp16, values rounded half away from zero") {
  // amax = 127 gives d = 1 exactly, so q = round(x) with C's roundf: 0.5 -> 1, -2.5 -> -3, 1.5 -> 2.
  std::vector<float> x(32, 0.0f);
  const float head[] = {127.0f, -0.5f, 0.5f, 1.5f, 2.5f, -2.5f, 0.49f, -126.6f};
  std::memcpy(x.data(), head, sizeof head);
  Bytes expected;
  put_u16(expected, 0x3c00);
  put_bytes(expected, {127, 0xff, 1, 2, 3, 0xfd, 0, 0x81});  // -1 = 0xff, -3 = 0xfd, -127 = 0x81
  put_repeated(expected, 24, 0);
  CHECK(encode(GgmlType::q8_0, x) == expected);

  // An all-zero block: d = 0 and every q = 0.
  Bytes zero;
  put_repeated(zero, 34, 0);
  CHECK(encode(GgmlType::q8_0, std::vector<float>(32, 0.0f)) == zero);
}

TEST_CASE("f16 and bf16 quantizers write the rounded bits little-endian") {
  CHECK(encode(GgmlType::f16, {1.0f, 0.1f, -65520.0f}) == Bytes{0x00, 0x3c, 0x66, 0x2e, 0x00, 0xfc});
  CHECK(encode(GgmlType::bf16, {1.0f, -5.0f, std::bit_cast<float>(0x3f818000u)}) ==
        Bytes{0x80, 0x3f, 0xa0, 0xc0, 0x82, 0x3f});
  CHECK(encode(GgmlType::f32, {1.5f}) == Bytes{0x00, 0x00, 0xc0, 0x3f});
}
