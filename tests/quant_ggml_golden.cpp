// Golden vectors produced by a released ggml (tests/data/quant_golden.bin, written by
// scripts/make_quant_golden.sh from libggml-base.so, not by latte): ggml's reference quantization of
// a fixed 6144-value input covering 12 value distributions, and ggml's dequantization of random
// blocks. latte must reproduce both bit for bit.
#include <doctest/doctest.h>

#include <latte/quant.hpp>

#include "support/test_options.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

// Bit-identical floats; NaNs only need to be NaN on both sides: when both operands of an addition are
// NaN (e.g. Q4_1 with NaN d and m), which payload survives depends on the compiler's operand order.
bool same_float(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) || (std::isnan(a) && std::isnan(b));
}

struct GoldenEntry {
  uint32_t type_id;
  uint32_t kind;  // 0: ggml's quantization of the input; 1: random bytes with ggml's dequantization
  uint32_t n_values;
  std::vector<uint8_t> bytes;
  std::vector<float> floats;
};

struct Golden {
  std::vector<float> input;
  std::vector<GoldenEntry> entries;
};

class Reader {
 public:
  explicit Reader(std::vector<uint8_t> data) : data_(std::move(data)) {}
  uint32_t u32() {
    uint32_t v;
    take(&v, sizeof v);
    return v;
  }
  void take(void* dst, size_t n) {
    REQUIRE(pos_ + n <= data_.size());
    std::memcpy(dst, data_.data() + pos_, n);
    pos_ += n;
  }
  bool at_end() const { return pos_ == data_.size(); }

 private:
  std::vector<uint8_t> data_;
  size_t pos_ = 0;
};

Golden load_golden() {
  std::ifstream file(latte::test::data_path("quant_golden.bin"), std::ios::binary);
  REQUIRE(file.good());
  Reader r(std::vector<uint8_t>(std::istreambuf_iterator<char>(file), {}));
  char magic[8];
  r.take(magic, 8);
  REQUIRE(std::memcmp(magic, "LQGOLD01", 8) == 0);
  Golden g;
  g.input.resize(r.u32());
  r.take(g.input.data(), g.input.size() * sizeof(float));
  const uint32_t n_entries = r.u32();
  for (uint32_t i = 0; i < n_entries; ++i) {
    GoldenEntry e;
    e.type_id = r.u32();
    e.kind = r.u32();
    e.n_values = r.u32();
    e.bytes.resize(r.u32());
    const uint32_t has_floats = r.u32();
    r.take(e.bytes.data(), e.bytes.size());
    if (has_floats) {
      e.floats.resize(e.n_values);
      r.take(e.floats.data(), e.floats.size() * sizeof(float));
    }
    g.entries.push_back(std::move(e));
  }
  REQUIRE(r.at_end());
  return g;
}

}  // namespace

TEST_CASE("quantizers reproduce ggml's golden bytes for every quantizable type") {
  const Golden g = load_golden();
  int checked = 0;
  for (const GoldenEntry& e : g.entries) {
    if (e.kind != 0) continue;
    const auto type = static_cast<latte::GgmlType>(e.type_id);
    const std::string name(latte::type_traits(type).name);
    CAPTURE(name);
    REQUIRE(e.n_values <= g.input.size());
    REQUIRE(latte::row_bytes(type, e.n_values) == e.bytes.size());
    std::vector<uint8_t> ours(e.bytes.size(), 0);
    latte::quantize_row(type, g.input.data(), ours.data(), e.n_values);
    size_t first_difference = 0;
    while (first_difference < ours.size() && ours[first_difference] == e.bytes[first_difference]) ++first_difference;
    CAPTURE(first_difference);
    CHECK(first_difference == ours.size());
    ++checked;
  }
  CHECK(checked == 17);  // f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, q2_K..q8_K, mxfp4, iq4_nl, iq4_xs
}

TEST_CASE("dequantizers reproduce ggml's golden floats for every decodable type") {
  const Golden g = load_golden();
  int checked = 0;
  for (const GoldenEntry& e : g.entries) {
    if (e.kind != 1) continue;
    const auto type = static_cast<latte::GgmlType>(e.type_id);
    const std::string name(latte::type_traits(type).name);
    CAPTURE(name);
    REQUIRE(latte::row_bytes(type, e.n_values) == e.bytes.size());
    std::vector<float> ours(e.n_values);
    latte::dequantize_row(type, e.bytes.data(), ours.data(), e.n_values);
    int64_t mismatches = 0;
    int64_t first = -1;
    for (size_t i = 0; i < ours.size(); ++i) {
      if (!same_float(ours[i], e.floats[i])) {
        if (first < 0) first = static_cast<int64_t>(i);
        ++mismatches;
      }
    }
    CAPTURE(first);
    CHECK(mismatches == 0);
    ++checked;
  }
  CHECK(checked == 19);  // every decodable block type ggml has a dequantizer for (all but q8_1)
}
