// Argument checking of the row codecs: partial blocks, negative counts, unsupported types and
// values that cannot be quantized are errors with codes and messages, never crashes.
#include <doctest/doctest.h>

#include <latte/error.hpp>
#include <latte/quant.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

using latte::ErrorCode;
using latte::GgmlType;

namespace {

template <class F>
void check_error(ErrorCode code, const char* must_mention, F&& f) {
  try {
    f();
    FAIL("no error thrown");
  } catch (const latte::Error& e) {
    CHECK(e.code() == code);
    CHECK_MESSAGE(std::string(e.what()).find(must_mention) != std::string::npos, e.what());
  }
}

}  // namespace

TEST_CASE("row codecs reject lengths that are not a multiple of the block size") {
  std::vector<uint8_t> bytes(4096);
  std::vector<float> floats(4096);
  for (auto [type, n] : {std::pair{GgmlType::q8_0, int64_t{33}}, std::pair{GgmlType::q4_0, int64_t{16}},
                         std::pair{GgmlType::f16, int64_t{-1}}}) {
    CAPTURE(n);
    check_error(ErrorCode::invalid_argument, std::to_string(n).c_str(),
                [&] { latte::dequantize_row(type, bytes.data(), floats.data(), n); });
    check_error(ErrorCode::invalid_argument, std::to_string(n).c_str(),
                [&] { latte::quantize_row(type, floats.data(), bytes.data(), n); });
    check_error(ErrorCode::invalid_argument, std::to_string(n).c_str(),
                [&] { (void)latte::dot_row(type, bytes.data(), floats.data(), n); });
    check_error(ErrorCode::invalid_argument, std::to_string(n).c_str(),
                [&] { latte::dequantize_rows(type, bytes.data(), floats.data(), 2, n); });
  }
  check_error(ErrorCode::invalid_argument, "-3",
              [&] { latte::dequantize_rows(GgmlType::q8_0, bytes.data(), floats.data(), -3, 32); });
}

TEST_CASE("dequantizing a type latte cannot decode names the type") {
  std::vector<uint8_t> bytes(1024);
  std::vector<float> floats(256);
  for (GgmlType type : {GgmlType::iq2_xxs, GgmlType::iq3_s, GgmlType::tq2_0, GgmlType::iq1_m}) {
    const std::string name(latte::type_traits(type).name);
    check_error(ErrorCode::unsupported, name.c_str(),
                [&] { latte::dequantize_row(type, bytes.data(), floats.data(), 256); });
    check_error(ErrorCode::unsupported, name.c_str(),
                [&] { latte::quantize_row(type, floats.data(), bytes.data(), 256); });
  }
  check_error(ErrorCode::unsupported, "nvfp4",
              [&] { latte::quantize_row(GgmlType::nvfp4, floats.data(), bytes.data(), 64); });
  check_error(ErrorCode::invalid_file, "31",
              [&] { latte::dequantize_row(static_cast<GgmlType>(31), bytes.data(), floats.data(), 32); });
}

TEST_CASE("quantizing NaN or infinity into a block format is an error naming the index") {
  std::vector<uint8_t> bytes(1024);
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    std::vector<float> x(32, 1.0f);
    x[17] = bad;
    check_error(ErrorCode::invalid_argument, "17",
                [&] { latte::quantize_row(GgmlType::q8_0, x.data(), bytes.data(), 32); });
  }
  // Float formats carry NaN and infinity through.
  std::vector<float> x = {NAN, INFINITY};
  latte::quantize_row(GgmlType::f16, x.data(), bytes.data(), 2);
  CHECK(bytes[1] == 0x7e);
  CHECK(bytes[3] == 0x7c);
}

TEST_CASE("empty rows are accepted and touch nothing") {
  float out = 42.0f;
  latte::dequantize_row(GgmlType::q4_k, nullptr, &out, 0);
  latte::dequantize_rows(GgmlType::q4_k, nullptr, &out, 0, 256);
  latte::quantize_row(GgmlType::q4_k, nullptr, nullptr, 0);
  CHECK(latte::dot_row(GgmlType::q4_k, nullptr, nullptr, 0) == 0.0f);
  CHECK(out == 42.0f);
}
