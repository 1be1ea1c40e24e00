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

TEST_CASE("q4_0 and q4_1 blocks: low nibbles are values 0..15, high nibbles values 16..31") {
  Bytes q40;
  put_u16(q40, 0x4000);  // d = 2
  for (int j = 0; j < 16; ++j) q40.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  check_bits(decode(GgmlType::q4_0, q40, 32), {-16, -14, -12, -10, -8, -6, -4, -2, 0,  2,  4,  6,  8,   10,  12,  14,
                                               14,  12,  10,  8,   6,  4,  2,  0,  -2, -4, -6, -8, -10, -12, -14, -16});
  Bytes q41;
  put_u16(q41, 0x3800);  // d = 0.5
  put_u16(q41, 0xbc00);  // m = -1
  for (int j = 0; j < 16; ++j) q41.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  check_bits(decode(GgmlType::q4_1, q41, 32), {-1, -0.5, 0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5,  6, 6.5, 6.5,
                                               6,  5.5,  5, 4.5, 4, 3.5, 3, 2.5, 2, 1.5, 1, 0.5, 0, -0.5, -1});
}

TEST_CASE("q5_0 and q5_1 blocks: the fifth bit of value j is bit j of qh") {
  Bytes q50;
  put_u16(q50, 0x3c00);       // d = 1
  put_u32(q50, 0x0000ffffu);  // values 0..15 get the fifth bit, 16..31 do not
  for (int j = 0; j < 16; ++j) q50.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  check_bits(decode(GgmlType::q5_0, q50, 32), {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,   10,  11,  12,  13,  14,  15,
                                               -1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12, -13, -14, -15, -16});
  Bytes q51;
  put_u16(q51, 0x3800);       // d = 0.5
  put_u16(q51, 0x4000);       // m = 2
  put_u32(q51, 0x80000001u);  // fifth bit for value 0 and value 31
  for (int j = 0; j < 16; ++j) q51.push_back(static_cast<uint8_t>(j | (j << 4)));
  check_bits(decode(GgmlType::q5_1, q51, 32), {10, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7, 7.5, 8, 8.5, 9, 9.5,
                                               2,  2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7, 7.5, 8, 8.5, 9, 17.5});
}

TEST_CASE("q8_1 block decodes to d * q, ignoring the stored sum") {
  Bytes b;
  put_u16(b, 0x3400);  // d = 0.25
  put_u16(b, 0x7e00);  // s: NaN, must not matter
  for (int j = 0; j < 32; ++j) b.push_back(static_cast<uint8_t>(j - 16));
  std::vector<float> expected;
  for (int j = 0; j < 32; ++j) expected.push_back(0.25f * static_cast<float>(j - 16));
  check_bits(decode(GgmlType::q8_1, b, 32), expected);
}

TEST_CASE("mxfp4 blocks: E2M1 values times 2^(e-127) for every e, including 0 and 255") {
  // e = 128: unit 2 = twice the E2M1 table {0, .5, 1, 1.5, 2, 3, 4, 6}.
  Bytes b;
  b.push_back(128);
  for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  // e = 119: 2^-8; e = 0: 2^-127 (a float subnormal); e = 255: 2^128, so 6 * 2^128 overflows.
  for (int e : {119, 0, 1, 255}) {
    b.push_back(static_cast<uint8_t>(e));
    for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  }
  const std::vector<float> got = decode(GgmlType::mxfp4, b, 5 * 32);
  const std::vector<float> doubled = {0,   1,  2,  3,  4,  6,  8,  12, 0,  -1, -2, -3, -4, -6, -8, -12,
                                      -12, -8, -6, -4, -3, -2, -1, 0,  12, 8,  6,  4,  3,  2,  1,  0};
  check_bits({got.begin(), got.begin() + 32}, doubled);
  std::vector<float> scaled;
  for (float v : doubled) scaled.push_back(v * 0x1p-9f);
  check_bits({got.begin() + 32, got.begin() + 64}, scaled);
  CHECK(got[64 + 1] == 0x1p-128f);    // nibble 1 (E2M1 0.5) at e = 0: 0.5 * 2^-127
  CHECK(got[64 + 7] == 0x1.8p-125f);  // nibble 7 (E2M1 6) at e = 0: 6 * 2^-127
  CHECK(got[96 + 7] == 0x1.8p-124f);  // e = 1: 6 * 2^-126
  CHECK(got[128 + 1] == 0x1p127f);    // e = 255: 0.5 * 2^128
  CHECK(got[128 + 7] == INFINITY);
  CHECK(got[128 + 15] == -INFINITY);
  CHECK(std::bit_cast<uint32_t>(got[8]) == 0u);  // nibble 8 is +0, not -0
}

TEST_CASE("nvfp4 blocks: four sub-blocks of 16 with unsigned E4M3 scales") {
  Bytes b;
  put_bytes(b, {0x38, 0x40, 0x01, 0x7f});  // scales 1, 2, 2^-9 (subnormal), 0x7f decodes to 0
  for (int s = 0; s < 4; ++s) {
    for (int j = 0; j < 8; ++j) b.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  }
  const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  const float scale[4] = {1.0f, 2.0f, 0x1p-9f, 0.0f};
  std::vector<float> expected;
  for (int s = 0; s < 4; ++s) {
    for (int j = 0; j < 8; ++j) expected.push_back(e2m1[j] * scale[s]);
    for (int j = 0; j < 8; ++j) expected.push_back(e2m1[15 - j] * scale[s]);
  }
  check_bits(decode(GgmlType::nvfp4, b, 64), expected);
  CHECK(expected[16 + 7] == 12.0f);  // 6 * 2
}

TEST_CASE("q1_0 and q2_0 blocks") {
  Bytes q1;
  put_u16(q1, 0x3c00);  // d = 1
  put_bytes(q1, {0x01, 0x80});
  put_repeated(q1, 14, 0x00);
  std::vector<float> expected(128, -1.0f);
  expected[0] = 1.0f;   // bit 0 of byte 0
  expected[15] = 1.0f;  // bit 7 of byte 1
  check_bits(decode(GgmlType::q1_0, q1, 128), expected);

  Bytes q2;
  put_u16(q2, 0x4000);         // d = 2
  put_repeated(q2, 16, 0xe4);  // codes 0, 1, 2, 3 from the low bits up
  std::vector<float> expected2;
  for (int j = 0; j < 64; ++j) expected2.push_back(static_cast<float>(2 * (j % 4 - 1)));
  check_bits(decode(GgmlType::q2_0, q2, 64), expected2);
}

TEST_CASE("iq4_nl and iq4_xs blocks: codes index the 16 non-uniform levels, xs with 6-bit scales - 32") {
  const float levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  Bytes nl;
  put_u16(nl, 0x3800);  // d = 0.5
  for (int j = 0; j < 16; ++j) nl.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  std::vector<float> expected;
  for (int j = 0; j < 16; ++j) expected.push_back(0.5f * levels[j]);
  for (int j = 0; j < 16; ++j) expected.push_back(0.5f * levels[15 - j]);
  check_bits(decode(GgmlType::iq4_nl, nl, 32), expected);
  CHECK(expected[0] == -63.5f);
  CHECK(expected[16] == 56.5f);

  // sub-block s: scale ls_s = {0, 1, 31, 32, 33, 47, 62, 63}, so ls - 32 runs from -32 to 31 (0 for s = 3)
  const int ls[8] = {0, 1, 31, 32, 33, 47, 62, 63};
  Bytes xs;
  put_u16(xs, 0x4000);  // d = 2
  uint16_t high = 0;
  for (int s = 0; s < 8; ++s) high = static_cast<uint16_t>(high | ((ls[s] >> 4) << (2 * s)));
  put_u16(xs, high);
  for (int s = 0; s < 8; s += 2) xs.push_back(static_cast<uint8_t>((ls[s] & 15) | ((ls[s + 1] & 15) << 4)));
  for (int s = 0; s < 8; ++s) {
    for (int j = 0; j < 16; ++j) xs.push_back(static_cast<uint8_t>(((j + s) % 16) | (((3 * j + s) % 16) << 4)));
  }
  std::vector<float> expected_xs;
  for (int s = 0; s < 8; ++s) {
    const float dl = 2.0f * static_cast<float>(ls[s] - 32);
    for (int j = 0; j < 16; ++j) expected_xs.push_back(dl * levels[(j + s) % 16]);
    for (int j = 0; j < 16; ++j) expected_xs.push_back(dl * levels[(3 * j + s) % 16]);
  }
  check_bits(decode(GgmlType::iq4_xs, xs, 256), expected_xs);
  CHECK(expected_xs[0] == 8128.0f);  // 2 * (0 - 32) * -127
  CHECK(expected_xs[7 * 32] == 62.0f * levels[7]);
}

// K-quants: each test picks a level for every value and per-sub-block scales, writes the bytes
// following the layout documented in latte/quant_blocks.hpp, and expects the documented formula.
// All numbers are small integers times powers of two, so every product is exact; the formula keeps
// ggml's order (d * scale first) only for the sign of zero products.

TEST_CASE("q2_K block layout: 2-bit levels in four bit planes, 4-bit scale and min per 16 values") {
  auto level = [](int v) { return (v * 37 + v / 16) % 4; };
  Bytes b;
  for (int k = 0; k < 16; ++k) b.push_back(static_cast<uint8_t>(k | ((15 - k) << 4)));  // sc = k, m = 15 - k
  std::vector<uint8_t> qs(64, 0);
  for (int v = 0; v < 256; ++v) {
    const int h = v / 128, j = (v % 128) / 32, l = v % 32;
    qs[32 * h + l] = static_cast<uint8_t>(qs[32 * h + l] | (level(v) << (2 * j)));
  }
  b.insert(b.end(), qs.begin(), qs.end());
  put_u16(b, 0x3c00);  // d = 1
  put_u16(b, 0x3800);  // dmin = 0.5
  std::vector<float> expected;
  for (int v = 0; v < 256; ++v) {
    const int k = 8 * (v / 128) + 2 * ((v % 128) / 32) + (v % 32) / 16;
    expected.push_back(static_cast<float>(k * level(v)) - 0.5f * static_cast<float>(15 - k));
  }
  const std::vector<float> got = decode(GgmlType::q2_k, b, 256);
  check_bits(got, expected);
  CHECK(got[0] == -7.5f);    // k = 0: 0 * level - 0.5 * 15
  CHECK(got[255] == 30.0f);  // k = 15: 15 * level 2 - 0.5 * 0
}

TEST_CASE("q3_K block layout: third bit in hmask, 6-bit signed scales packed in 12 bytes") {
  auto level = [](int v) { return (v * 13 + v / 32) % 8 - 4; };  // in [-4, 4)
  auto scale = [](int k) { return 32 + (k - 8) * 3; };           // 6-bit, 8..53
  Bytes b;
  std::vector<uint8_t> hmask(32, 0), qs(64, 0), scales(12, 0);
  for (int v = 0; v < 256; ++v) {
    const int h = v / 128, j = (v % 128) / 32, l = v % 32;
    const int code = level(v) + 4;
    qs[32 * h + l] = static_cast<uint8_t>(qs[32 * h + l] | ((code & 3) << (2 * j)));
    if (code & 4) hmask[l] = static_cast<uint8_t>(hmask[l] | (1 << (4 * h + j)));
  }
  for (int k = 0; k < 16; ++k) {
    const int s = scale(k);
    if (k < 8) {
      scales[k] = static_cast<uint8_t>(scales[k] | (s & 15));
    } else {
      scales[k - 8] = static_cast<uint8_t>(scales[k - 8] | ((s & 15) << 4));
    }
    scales[8 + k % 4] = static_cast<uint8_t>(scales[8 + k % 4] | ((s >> 4) << (2 * (k / 4))));
  }
  b.insert(b.end(), hmask.begin(), hmask.end());
  b.insert(b.end(), qs.begin(), qs.end());
  b.insert(b.end(), scales.begin(), scales.end());
  put_u16(b, 0x3800);  // d = 0.5
  std::vector<float> expected;
  for (int v = 0; v < 256; ++v) {
    const int k = 8 * (v / 128) + 2 * ((v % 128) / 32) + (v % 32) / 16;
    expected.push_back((0.5f * static_cast<float>(scale(k) - 32)) * static_cast<float>(level(v)));
  }
  const std::vector<float> got = decode(GgmlType::q3_k, b, 256);
  check_bits(got, expected);
  CHECK(got[0] == 0.5f * -24.0f * -4.0f);  // k = 0: scale 8 - 32, level -4
}

namespace {

// Q4_K / Q5_K 6-bit scale and min packing, written from the layout description.
std::vector<uint8_t> pack_scale_min(const int* sc, const int* m) {
  std::vector<uint8_t> p(12, 0);
  for (int b = 0; b < 8; ++b) {
    if (b < 4) {
      p[b] = static_cast<uint8_t>(p[b] | sc[b]);
      p[b + 4] = static_cast<uint8_t>(p[b + 4] | m[b]);
    } else {
      p[b + 4] = static_cast<uint8_t>((sc[b] & 15) | ((m[b] & 15) << 4));
      p[b - 4] = static_cast<uint8_t>(p[b - 4] | ((sc[b] >> 4) << 6));
      p[b] = static_cast<uint8_t>(p[b] | ((m[b] >> 4) << 6));
    }
  }
  return p;
}

constexpr int k_sc[8] = {1, 2, 3, 4, 17, 33, 50, 63};
constexpr int k_min[8] = {0, 1, 2, 3, 20, 40, 62, 63};

}  // namespace

TEST_CASE("q4_K block layout: nibbles by 64-value chunks, 6-bit scales and mins") {
  auto level = [](int v) { return (v * 7) % 16; };
  Bytes b;
  put_u16(b, 0x3c00);  // d = 1
  put_u16(b, 0x3800);  // dmin = 0.5
  const auto packed = pack_scale_min(k_sc, k_min);
  b.insert(b.end(), packed.begin(), packed.end());
  std::vector<uint8_t> qs(128, 0);
  for (int v = 0; v < 256; ++v) {
    const int c = v / 64, u = (v % 64) / 32, l = v % 32;
    qs[32 * c + l] = static_cast<uint8_t>(qs[32 * c + l] | (level(v) << (4 * u)));
  }
  b.insert(b.end(), qs.begin(), qs.end());
  std::vector<float> expected;
  for (int v = 0; v < 256; ++v) {
    expected.push_back(static_cast<float>(k_sc[v / 32] * level(v)) - 0.5f * static_cast<float>(k_min[v / 32]));
  }
  const std::vector<float> got = decode(GgmlType::q4_k, b, 256);
  check_bits(got, expected);
  CHECK(got[0] == 0.0f);
  CHECK(got[255] == 535.5f);  // sub-block 7: 63 * level 9 - 0.5 * 63
  CHECK(got[160] == -20.0f);  // sub-block 5: 33 * level 0 - 0.5 * 40
}

TEST_CASE("q5_K block layout: as q4_K plus a fifth bit per value in qh") {
  auto level = [](int v) { return (v * 11 + v / 64) % 32; };
  Bytes b;
  put_u16(b, 0x3c00);  // d = 1
  put_u16(b, 0x3800);  // dmin = 0.5
  const auto packed = pack_scale_min(k_sc, k_min);
  b.insert(b.end(), packed.begin(), packed.end());
  std::vector<uint8_t> qh(32, 0), qs(128, 0);
  for (int v = 0; v < 256; ++v) {
    const int c = v / 64, u = (v % 64) / 32, l = v % 32;
    qs[32 * c + l] = static_cast<uint8_t>(qs[32 * c + l] | ((level(v) & 15) << (4 * u)));
    qh[l] = static_cast<uint8_t>(qh[l] | ((level(v) >> 4) << (2 * c + u)));
  }
  b.insert(b.end(), qh.begin(), qh.end());
  b.insert(b.end(), qs.begin(), qs.end());
  std::vector<float> expected;
  for (int v = 0; v < 256; ++v) {
    expected.push_back(static_cast<float>(k_sc[v / 32] * level(v)) - 0.5f * static_cast<float>(k_min[v / 32]));
  }
  const std::vector<float> got = decode(GgmlType::q5_k, b, 256);
  check_bits(got, expected);
  CHECK(got[1] == 11.0f);  // sub-block 0: scale 1, min 0, level 11
}

TEST_CASE("q6_K block layout: 4 low bits in ql, 2 high bits in qh, int8 scales per 16 values") {
  auto level = [](int v) { return (v * 29 + v / 128) % 64; };  // stored 6-bit value, q = level - 32
  auto scale = [](int k) { return k * 17 - 128; };             // int8: -128..127
  Bytes b;
  std::vector<uint8_t> ql(128, 0), qh(64, 0);
  for (int v = 0; v < 256; ++v) {
    const int h = v / 128, j = (v % 128) / 32, l = v % 32;
    const int lo = level(v) & 15, hi = level(v) >> 4;
    const int ql_index = 64 * h + 32 * (j & 1) + l;
    ql[ql_index] = static_cast<uint8_t>(ql[ql_index] | (lo << (j >= 2 ? 4 : 0)));
    qh[32 * h + l] = static_cast<uint8_t>(qh[32 * h + l] | (hi << (2 * j)));
  }
  b.insert(b.end(), ql.begin(), ql.end());
  b.insert(b.end(), qh.begin(), qh.end());
  for (int k = 0; k < 16; ++k) b.push_back(static_cast<uint8_t>(static_cast<int8_t>(scale(k))));
  put_u16(b, 0x3400);  // d = 0.25
  std::vector<float> expected;
  for (int v = 0; v < 256; ++v) {
    const int k = 8 * (v / 128) + 2 * ((v % 128) / 32) + (v % 32) / 16;
    expected.push_back((0.25f * static_cast<float>(scale(k))) * static_cast<float>(level(v) - 32));
  }
  const std::vector<float> got = decode(GgmlType::q6_k, b, 256);
  check_bits(got, expected);
  CHECK(got[0] == 0.25f * -128.0f * -32.0f);
}

TEST_CASE("q8_K block decodes to d * q with a float d") {
  Bytes b;
  put_u32(b, 0x3e000000u);  // d = 0.125
  for (int j = 0; j < 256; ++j) b.push_back(static_cast<uint8_t>((j * 7) % 256));
  put_repeated(b, 32, 0x55);  // bsums: not used for decoding
  std::vector<float> expected;
  for (int j = 0; j < 256; ++j) expected.push_back(0.125f * static_cast<float>(static_cast<int8_t>((j * 7) % 256)));
  check_bits(decode(GgmlType::q8_k, b, 256), expected);
}
