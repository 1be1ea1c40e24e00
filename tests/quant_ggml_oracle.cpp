// Cross-check against ggml itself: when LATTE_GGML_LIB names a libggml-base shared library (for
// example the one in npm's @node-llama-cpp/linux-x64 package, fetched by
// scripts/fetch_ggml_oracle.sh), latte's type table, fp16/bf16 conversions, dequantizers and
// reference quantizers must match ggml's bit for bit on fresh random inputs. Skipped without it.
#include <doctest/doctest.h>

#include <latte/quant.hpp>

#include <dlfcn.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using latte::GgmlType;

namespace {

// Bit-identical floats; NaNs only need to be NaN on both sides: when both operands of an addition are
// NaN (e.g. Q4_1 with NaN d and m), which payload survives depends on the compiler's operand order.
bool same_float(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) || (std::isnan(a) && std::isnan(b));
}

using DecodeFn = void (*)(const void*, float*, int64_t);
using EncodeFn = void (*)(const float*, void*, int64_t);
// ggml's quantize_<type>(src, dst, nrow, n_per_row, imatrix): what llama.cpp's quantizer writes a file with.
using ChunkEncodeFn = size_t (*)(const float*, void*, int64_t, int64_t, const float*);

class GgmlLibrary {
 public:
  static GgmlLibrary* get() {
    static GgmlLibrary* library = []() -> GgmlLibrary* {
      const char* path = std::getenv("LATTE_GGML_LIB");
      if (!path || !*path) return nullptr;
      void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (!handle) return nullptr;
      return new GgmlLibrary(handle);
    }();
    return library;
  }
  template <class F>
  F symbol(const std::string& name) const {
    return reinterpret_cast<F>(dlsym(handle_, name.c_str()));
  }

 private:
  explicit GgmlLibrary(void* handle) : handle_(handle) {}
  void* handle_;
};

bool oracle_missing() { return GgmlLibrary::get() == nullptr; }

// ggml's function names for each type latte handles.
struct Names {
  GgmlType type;
  const char* decode;  // dequantize_row_* or a *_row conversion
  const char* encode;  // quantize_row_*_ref or a *_row conversion; nullptr when ggml has none we compare
  bool chunk = false;  // encode is a ChunkEncodeFn (no importance matrix)
};
const Names k_names[] = {
    {GgmlType::f16, "ggml_fp16_to_fp32_row", "ggml_fp32_to_fp16_row"},
    {GgmlType::bf16, "ggml_bf16_to_fp32_row", "ggml_fp32_to_bf16_row_ref"},
    {GgmlType::q4_0, "dequantize_row_q4_0", "quantize_row_q4_0_ref"},
    {GgmlType::q4_1, "dequantize_row_q4_1", "quantize_row_q4_1_ref"},
    {GgmlType::q5_0, "dequantize_row_q5_0", "quantize_row_q5_0_ref"},
    {GgmlType::q5_1, "dequantize_row_q5_1", "quantize_row_q5_1_ref"},
    {GgmlType::q8_0, "dequantize_row_q8_0", "quantize_row_q8_0_ref"},
    {GgmlType::q8_1, nullptr, "quantize_row_q8_1_ref"},
    {GgmlType::q2_k, "dequantize_row_q2_K", "quantize_row_q2_K_ref"},
    {GgmlType::q3_k, "dequantize_row_q3_K", "quantize_row_q3_K_ref"},
    {GgmlType::q4_k, "dequantize_row_q4_K", "quantize_row_q4_K_ref"},
    {GgmlType::q5_k, "dequantize_row_q5_K", "quantize_row_q5_K_ref"},
    {GgmlType::q6_k, "dequantize_row_q6_K", "quantize_row_q6_K_ref"},
    {GgmlType::q8_k, "dequantize_row_q8_K", "quantize_row_q8_K_ref"},
    {GgmlType::mxfp4, "dequantize_row_mxfp4", "quantize_row_mxfp4_ref"},
    {GgmlType::nvfp4, "dequantize_row_nvfp4", nullptr},
    {GgmlType::q1_0, "dequantize_row_q1_0", nullptr},
    {GgmlType::q2_0, "dequantize_row_q2_0", nullptr},
    // IQ4_NL: quantize_row_iq4_nl_ref skips the 15-scale search that quantize_iq4_nl (what llama.cpp's quantizer
    // runs) makes; latte writes what the file quantizer writes
    {GgmlType::iq4_nl, "dequantize_row_iq4_nl", "quantize_iq4_nl", true},
    {GgmlType::iq4_xs, "dequantize_row_iq4_xs", "quantize_row_iq4_xs_ref"},
};

// Rows of 1024 values (a multiple of every block size) drawn from distributions that stress the
// scale searches: smooth signals, heavy tails, one-signed blocks, constants, zeros, tiny values,
// and values on rounding ties.
std::vector<float> make_inputs(std::mt19937& rng, int rows) {
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::uniform_int_distribution<int> small_int(-40, 40);
  std::vector<float> x;
  for (int r = 0; r < rows; ++r) {
    const int kind = r % 12;
    const float offset = uniform(rng) * 100.0f;
    const float magnitude = std::pow(10.0f, uniform(rng) * 4.0f - 2.0f);
    for (int i = 0; i < 1024; ++i) {
      float v = 0;
      switch (kind) {
        case 0:
          v = gauss(rng);
          break;
        case 1:
          v = 0.1f + 2.0f * std::cos(static_cast<float>(i) + offset);
          break;
        case 2:
          v = uniform(rng) * magnitude;
          break;
        case 3:
          v = gauss(rng) * (rng() % 100 == 0 ? 50.0f : 1.0f) * magnitude;
          break;
        case 4:
          v = std::exp(gauss(rng)) * magnitude;
          break;
        case 5:
          v = -std::exp(gauss(rng)) * magnitude;
          break;
        case 6:
          v = (i / 16) % 3 == 0 ? 0.0f : ((i / 16) % 3 == 1 ? 0.37f * magnitude : gauss(rng));
          break;
        case 7:
          v = gauss(rng) * 1e-6f * (i % 64 == 0 ? 1.0f : 1e-9f);
          break;
        case 8:
          v = static_cast<float>(small_int(rng)) * 0.25f;
          break;
        case 9:
          v = static_cast<float>(small_int(rng)) * magnitude;
          break;
        case 10:
          v = (i % 32 == 5) ? gauss(rng) * 1000.0f : gauss(rng) * 0.01f;
          break;
        default:
          v = gauss(rng) * (1.0f + static_cast<float>(i / 256)) * magnitude;
          break;
      }
      x.push_back(v);
    }
  }
  return x;
}

}  // namespace

TEST_CASE("ggml oracle: type table matches ggml_type_name / blck_size / type_size" * doctest::skip(oracle_missing())) {
  const GgmlLibrary& ggml = *GgmlLibrary::get();
  auto name = ggml.symbol<const char* (*)(int)>("ggml_type_name");
  auto block = ggml.symbol<int64_t (*)(int)>("ggml_blck_size");
  auto size = ggml.symbol<size_t (*)(int)>("ggml_type_size");
  REQUIRE((name != nullptr));
  for (int id = 0; id <= 42; ++id) {
    CAPTURE(id);
    const auto ours = latte::find_type_traits(static_cast<uint32_t>(id));
    if (!ours) {
      CHECK(block(id) == 0);  // ggml keeps a placeholder row for removed ids
      continue;
    }
    CHECK(ours->name == name(id));
    CHECK(ours->block_values == static_cast<uint32_t>(block(id)));
    CHECK(ours->block_bytes == size(id));
  }
}

TEST_CASE("ggml oracle: fp16 and bf16 conversions" * doctest::skip(oracle_missing())) {
  const GgmlLibrary& ggml = *GgmlLibrary::get();
  auto f16_to_f32 = ggml.symbol<float (*)(uint16_t)>("ggml_fp16_to_fp32");
  auto f32_to_f16 = ggml.symbol<uint16_t (*)(float)>("ggml_fp32_to_fp16");
  auto f32_to_bf16 = ggml.symbol<void (*)(const float*, uint16_t*, int64_t)>("ggml_fp32_to_bf16_row_ref");
  REQUIRE((f16_to_f32 != nullptr));
  REQUIRE((f32_to_bf16 != nullptr));
  for (uint32_t h = 0; h < 65536; ++h) {
    REQUIRE(std::bit_cast<uint32_t>(latte::fp16_to_fp32(static_cast<uint16_t>(h))) ==
            std::bit_cast<uint32_t>(f16_to_f32(static_cast<uint16_t>(h))));
  }
  std::random_device seed_source;
  const uint32_t seed = seed_source();
  CAPTURE(seed);
  std::mt19937 rng(seed);
  for (int i = 0; i < 1000000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    CAPTURE(f);
    REQUIRE(latte::fp32_to_fp16(f) == f32_to_f16(f));
    uint16_t bf = 0;
    f32_to_bf16(&f, &bf, 1);
    REQUIRE(latte::fp32_to_bf16(f) == bf);
  }
}

TEST_CASE("ggml oracle: dequantizers match on random bytes" * doctest::skip(oracle_missing())) {
  const GgmlLibrary& ggml = *GgmlLibrary::get();
  std::random_device seed_source;
  const uint32_t seed = seed_source();
  CAPTURE(seed);
  std::mt19937 rng(seed);
  for (const Names& names : k_names) {
    if (!names.decode) continue;
    const latte::TypeTraits& t = latte::type_traits(names.type);
    const std::string type_name(t.name);
    CAPTURE(type_name);
    auto decode = ggml.symbol<DecodeFn>(names.decode);
    REQUIRE((decode != nullptr));
    const int64_t n = 64 * 1024;
    std::vector<uint8_t> bytes(latte::row_bytes(names.type, n));
    for (int round = 0; round < 4; ++round) {
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      if (round % 2 == 1) {
        // Keep every half-precision field finite and moderate in half the rounds: clear the top
        // exponent bit of every second byte pair (affects quants too, which is fine).
        for (size_t i = 1; i < bytes.size(); i += 2) bytes[i] &= 0xbf;
      }
      std::vector<float> ours(static_cast<size_t>(n)), theirs(static_cast<size_t>(n));
      latte::dequantize_row(names.type, bytes.data(), ours.data(), n);
      decode(bytes.data(), theirs.data(), n);
      int64_t mismatches = 0;
      int64_t first = -1;
      for (int64_t i = 0; i < n; ++i) {
        if (!same_float(ours[i], theirs[i])) {
          if (first < 0) first = i;
          ++mismatches;
        }
      }
      CAPTURE(first);
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("ggml oracle: reference quantizers write the same bytes" * doctest::skip(oracle_missing())) {
  const GgmlLibrary& ggml = *GgmlLibrary::get();
  std::random_device seed_source;
  const uint32_t seed = seed_source();
  CAPTURE(seed);
  std::mt19937 rng(seed);
  const int rows = 96;
  const std::vector<float> x = make_inputs(rng, rows);
  for (const Names& names : k_names) {
    if (!names.encode) continue;
    const latte::TypeTraits& t = latte::type_traits(names.type);
    const std::string type_name(t.name);
    CAPTURE(type_name);
    auto encode = names.chunk ? nullptr : ggml.symbol<EncodeFn>(names.encode);
    auto encode_chunk = names.chunk ? ggml.symbol<ChunkEncodeFn>(names.encode) : nullptr;
    REQUIRE((encode != nullptr || encode_chunk != nullptr));
    const uint64_t row_size = latte::row_bytes(names.type, 1024);
    for (int r = 0; r < rows; ++r) {
      CAPTURE(r);
      std::vector<uint8_t> ours(row_size, 0), theirs(row_size, 0);
      latte::quantize_row(names.type, x.data() + 1024 * r, ours.data(), 1024);
      if (encode_chunk != nullptr) {
        REQUIRE(encode_chunk(x.data() + 1024 * r, theirs.data(), 1, 1024, nullptr) == row_size);
      } else {
        encode(x.data() + 1024 * r, theirs.data(), 1024);
      }
      size_t first = 0;
      while (first < row_size && ours[first] == theirs[first]) ++first;
      CAPTURE(first);
      CHECK(first == row_size);
    }
  }
}
