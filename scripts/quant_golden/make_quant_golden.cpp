// Writes tests/data/quant_golden.bin from a released ggml library (libggml-base.so, see
// scripts/fetch_ggml_oracle.sh): ggml's reference quantization of a fixed input for every type latte
// quantizes, and ggml's dequantization of random blocks for every type latte decodes. latte's test
// suite compares its own codecs against these bytes, so CI checks bit-compatibility with ggml
// without needing the library. Built and run by scripts/make_quant_golden.sh.
//
// File layout (little-endian):
//   "LQGOLD01" | u32 n_input | f32 input[n_input] | u32 n_entries | entries
//   entry: u32 type_id | u32 kind | u32 n_values | u32 n_bytes | u32 has_floats | u8 bytes[n_bytes]
//          | f32 floats[n_values] if has_floats
//   kind 0: bytes = ggml's quantization of input[0..n_values); kind 1: random bytes, floats = ggml's
//   dequantization of them.
#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

struct TypeInfo {
  uint32_t id;
  uint32_t block_values;
  uint32_t block_bytes;
  const char* decode;  // ggml function, or nullptr
  const char* encode;  // ggml function, or nullptr
  bool chunk = false;  // encode is quantize_<type>(src, dst, nrow, n_per_row, imatrix), run without an imatrix
};

const TypeInfo k_types[] = {
    {1, 1, 2, "ggml_fp16_to_fp32_row", "ggml_fp32_to_fp16_row"},
    {30, 1, 2, "ggml_bf16_to_fp32_row", "ggml_fp32_to_bf16_row_ref"},
    {2, 32, 18, "dequantize_row_q4_0", "quantize_row_q4_0_ref"},
    {3, 32, 20, "dequantize_row_q4_1", "quantize_row_q4_1_ref"},
    {6, 32, 22, "dequantize_row_q5_0", "quantize_row_q5_0_ref"},
    {7, 32, 24, "dequantize_row_q5_1", "quantize_row_q5_1_ref"},
    {8, 32, 34, "dequantize_row_q8_0", "quantize_row_q8_0_ref"},
    {9, 32, 36, nullptr, "quantize_row_q8_1_ref"},
    {10, 256, 84, "dequantize_row_q2_K", "quantize_row_q2_K_ref"},
    {11, 256, 110, "dequantize_row_q3_K", "quantize_row_q3_K_ref"},
    {12, 256, 144, "dequantize_row_q4_K", "quantize_row_q4_K_ref"},
    {13, 256, 176, "dequantize_row_q5_K", "quantize_row_q5_K_ref"},
    {14, 256, 210, "dequantize_row_q6_K", "quantize_row_q6_K_ref"},
    {15, 256, 292, "dequantize_row_q8_K", "quantize_row_q8_K_ref"},
    {39, 32, 17, "dequantize_row_mxfp4", "quantize_row_mxfp4_ref"},
    {40, 64, 36, "dequantize_row_nvfp4", nullptr},
    {41, 128, 18, "dequantize_row_q1_0", nullptr},
    {42, 64, 18, "dequantize_row_q2_0", nullptr},
    // appended last, so that the entries above keep their random bytes
    {20, 32, 18, "dequantize_row_iq4_nl", "quantize_iq4_nl", true},  // what llama.cpp's quantizer writes
    {23, 256, 136, "dequantize_row_iq4_xs", "quantize_row_iq4_xs_ref"},
};

// 12 rows of 512 values, one distribution each (the same families as tests/quant_ggml_oracle.cpp).
std::vector<float> make_input() {
  std::mt19937 rng(20240611);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::uniform_int_distribution<int> small_int(-40, 40);
  std::vector<float> x;
  for (int kind = 0; kind < 12; ++kind) {
    const float offset = uniform(rng) * 100.0f;
    const float magnitude = std::pow(10.0f, uniform(rng) * 4.0f - 2.0f);
    for (int i = 0; i < 512; ++i) {
      float v = 0;
      switch (kind) {
        case 0: v = gauss(rng); break;
        case 1: v = 0.1f + 2.0f * std::cos(static_cast<float>(i) + offset); break;
        case 2: v = uniform(rng) * magnitude; break;
        case 3: v = gauss(rng) * (rng() % 100 == 0 ? 50.0f : 1.0f) * magnitude; break;
        case 4: v = std::exp(gauss(rng)) * magnitude; break;
        case 5: v = -std::exp(gauss(rng)) * magnitude; break;
        case 6: v = (i / 16) % 3 == 0 ? 0.0f : ((i / 16) % 3 == 1 ? 0.37f * magnitude : gauss(rng)); break;
        case 7: v = gauss(rng) * 1e-6f * (i % 64 == 0 ? 1.0f : 1e-9f); break;
        case 8: v = static_cast<float>(small_int(rng)) * 0.25f; break;
        case 9: v = static_cast<float>(small_int(rng)) * magnitude; break;
        case 10: v = (i % 32 == 5) ? gauss(rng) * 1000.0f : gauss(rng) * 0.01f; break;
        default: v = gauss(rng) * (1.0f + static_cast<float>(i / 128)) * magnitude; break;
      }
      x.push_back(v);
    }
  }
  return x;
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_raw(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_quant_golden LIBGGML_BASE OUTPUT\n");
    return 2;
  }
  void* ggml = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!ggml) {
    std::fprintf(stderr, "cannot load %s: %s\n", argv[1], dlerror());
    return 1;
  }
  const std::vector<float> input = make_input();
  std::vector<uint8_t> out;
  put_raw(out, "LQGOLD01", 8);
  put_u32(out, static_cast<uint32_t>(input.size()));
  put_raw(out, input.data(), input.size() * sizeof(float));
  std::vector<uint8_t> entries;
  uint32_t n_entries = 0;
  std::mt19937 rng(7);
  for (const TypeInfo& t : k_types) {
    if (t.encode) {
      using Encode = void (*)(const float*, void*, int64_t);
      using ChunkEncode = size_t (*)(const float*, void*, int64_t, int64_t, const float*);
      void* encode = dlsym(ggml, t.encode);
      if (!encode) return std::fprintf(stderr, "missing %s\n", t.encode), 1;
      const size_t n = input.size();
      std::vector<uint8_t> bytes(n / t.block_values * t.block_bytes, 0);
      if (t.chunk) {
        reinterpret_cast<ChunkEncode>(encode)(input.data(), bytes.data(), 1, static_cast<int64_t>(n), nullptr);
      } else {
        reinterpret_cast<Encode>(encode)(input.data(), bytes.data(), static_cast<int64_t>(n));
      }
      for (uint32_t v : {t.id, 0u, static_cast<uint32_t>(n), static_cast<uint32_t>(bytes.size()), 0u}) put_u32(entries, v);
      put_raw(entries, bytes.data(), bytes.size());
      ++n_entries;
    }
    if (t.decode) {
      using Decode = void (*)(const void*, float*, int64_t);
      auto decode = reinterpret_cast<Decode>(dlsym(ggml, t.decode));
      if (!decode) return std::fprintf(stderr, "missing %s\n", t.decode), 1;
      const size_t n = 2048;
      std::vector<uint8_t> bytes(n / t.block_values * t.block_bytes);
      for (size_t i = 0; i < bytes.size(); ++i) {
        bytes[i] = static_cast<uint8_t>(rng());
        // Second half: keep half-precision fields moderate by clearing the top exponent bit of odd bytes.
        if (i >= bytes.size() / 2 && i % 2 == 1) bytes[i] &= 0xbf;
      }
      std::vector<float> floats(n);
      decode(bytes.data(), floats.data(), static_cast<int64_t>(n));
      for (uint32_t v : {t.id, 1u, static_cast<uint32_t>(n), static_cast<uint32_t>(bytes.size()), 1u}) put_u32(entries, v);
      put_raw(entries, bytes.data(), bytes.size());
      put_raw(entries, floats.data(), floats.size() * sizeof(float));
      ++n_entries;
    }
  }
  put_u32(out, n_entries);
  out.insert(out.end(), entries.begin(), entries.end());
  FILE* f = std::fopen(argv[2], "wb");
  if (!f || std::fwrite(out.data(), 1, out.size(), f) != out.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "cannot write %s\n", argv[2]);
    return 1;
  }
  std::printf("wrote %s: %u entries, %zu bytes\n", argv[2], n_entries, out.size());
  return 0;
}
