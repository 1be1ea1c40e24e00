// The GGUF reader as a parser of hostile input: a catalogue of corrupt files, each made from a valid
// writer output by one targeted change, must fail with the specific error (code, field, byte offset);
// and truncating or scrambling a valid file anywhere must give a latte::Error or a valid file, never a
// crash, a hang or a huge allocation.
#include <doctest/doctest.h>

#include "support/gguf_image.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>

#include <cstdint>
#include <functional>
#include <random>

namespace {

using latte::ErrorCode;
using latte::GgmlType;
using latte::gguf::Array;
using latte::gguf::File;
using latte::gguf::Value;
using latte::gguf::Writer;
using latte::test::after_string;
using latte::test::patch;
using latte::test::peek;
using Image = std::vector<std::byte>;

// A small valid file exercising every section: scalars, a bool, a string, arrays of strings and
// numbers, an explicit general.alignment, and three tensors of different types.
Image valid_image() {
  Writer w;
  w.set("general.architecture", "deepseek2");
  w.set("general.alignment", uint32_t{32});
  w.set("test.count", uint32_t{7});
  w.set("test.flag", true);
  w.set("test.words", Array(std::vector<std::string>{"alpha", "beta", "gamma"}));
  w.set("test.numbers", Array(std::vector<int32_t>{1, 2, 3}));
  w.add_tensor("tensor.a", GgmlType::f32, {4, 2});  // 32 bytes at data offset 0
  w.add_tensor("tensor.b", GgmlType::q8_0, {32});   // 34 bytes at data offset 32
  w.add_tensor("tensor.c", GgmlType::f16, {8});     // 16 bytes at data offset 96
  return w.write_to_memory([](size_t i, std::span<std::byte> dst) {
    for (size_t k = 0; k < dst.size(); ++k) dst[k] = static_cast<std::byte>(i + k);
  });
}

// Byte offsets of a key's value type and value.
size_t value_type_at(const Image& image, std::string_view key) { return after_string(image, key); }
size_t value_at(const Image& image, std::string_view key) { return after_string(image, key) + 4; }

// Byte offsets inside a tensor info (the reader's layout: name, n_dims, ne[n_dims], type, offset).
size_t n_dims_at(const Image& image, std::string_view name) { return after_string(image, name); }
size_t ne_at(const Image& image, std::string_view name, size_t d) { return n_dims_at(image, name) + 4 + 8 * d; }
size_t type_at(const Image& image, std::string_view name) {
  return ne_at(image, name, peek<uint32_t>(image, n_dims_at(image, name)));
}
size_t offset_at(const Image& image, std::string_view name) { return type_at(image, name) + 4; }

struct CorruptCase {
  std::string name;
  std::function<void(Image&)> corrupt;
  ErrorCode code;
  std::string message;  // a distinctive part of the error message
};

std::string at(size_t offset) { return " at byte offset " + std::to_string(offset) + ": "; }

std::vector<CorruptCase> catalogue(const Image& good) {
  const size_t count_value = value_at(good, "test.count");
  const size_t words_value = value_at(good, "test.words");  // u32 element type, u64 count, strings
  const size_t numbers_value = value_at(good, "test.numbers");
  const size_t arch_value = value_at(good, "general.architecture");
  const size_t alignment_value = value_at(good, "general.alignment");
  const size_t flag_value = value_at(good, "test.flag");
  const size_t word_gamma = latte::test::find_text(good, "gamma") - 8;  // element 2's length field
  const size_t b_ne0 = ne_at(good, "tensor.b", 0);
  const size_t c_offset = offset_at(good, "tensor.c");
  const size_t first_key = 24;
  const size_t last_key = value_type_at(good, "test.numbers") - 12 - 8;  // u64 length, "test.numbers"
  constexpr uint64_t huge = uint64_t{1} << 62;

  return {
      {"empty file", [](Image& f) { f.clear(); }, ErrorCode::invalid_file, "magic at byte offset 0: file truncated"},
      {"truncated header", [](Image& f) { f.resize(10); }, ErrorCode::invalid_file,
       "tensor count at byte offset 8: file truncated: needs 8 bytes, 2 left"},
      {"bad magic", [](Image& f) { f[3] = std::byte{'L'}; }, ErrorCode::invalid_file,
       "not a GGUF file: starts with 'GGUL'"},
      {"version 1", [](Image& f) { patch<uint32_t>(f, 4, 1); }, ErrorCode::unsupported, "GGUF version 1"},
      {"unknown version", [](Image& f) { patch<uint32_t>(f, 4, 4); }, ErrorCode::invalid_file,
       "version at byte offset 4: unknown GGUF version 4"},
      {"big-endian version", [](Image& f) { patch<uint32_t>(f, 4, 0x03000000); }, ErrorCode::unsupported, "big-endian"},
      {"huge tensor count", [](Image& f) { patch<uint64_t>(f, 8, uint64_t{1} << 40); }, ErrorCode::invalid_file,
       "tensor count at byte offset 8: 1099511627776 tensors cannot fit"},
      {"huge metadata count", [](Image& f) { patch<uint64_t>(f, 16, uint64_t{1} << 60); }, ErrorCode::invalid_file,
       "metadata count at byte offset 16: 1152921504606846976 key/value pairs cannot fit"},
      {"truncated inside a key", [=](Image& f) { f.resize(last_key + 8 + 5); }, ErrorCode::invalid_file,
       "metadata entry #5 key" + at(last_key) + "string length 12 exceeds the 5 bytes left"},
      {"truncated inside a value", [=](Image& f) { f.resize(count_value + 2); }, ErrorCode::invalid_file,
       "key 'test.count' value" + at(count_value) + "file truncated: needs 4 bytes, 2 left"},
      {"truncated inside an array", [=](Image& f) { f.resize(word_gamma + 10); }, ErrorCode::invalid_file,
       "key 'test.words' element 2" + at(word_gamma) + "string length 5 exceeds the 2 bytes left"},
      {"truncated inside a tensor info", [=](Image& f) { f.resize(b_ne0 + 3); }, ErrorCode::invalid_file,
       "tensor 'tensor.b' ne[0]" + at(b_ne0) + "file truncated"},
      {"truncated inside tensor data", [](Image& f) { f.resize(f.size() - 17); }, ErrorCode::invalid_file,
       "tensor 'tensor.c' data" + at(c_offset) + "16 bytes at data offset 96 extend past the end of the file"},
      {"string length 2^62", [=](Image& f) { patch<uint64_t>(f, arch_value, huge); }, ErrorCode::invalid_file,
       "key 'general.architecture' value" + at(arch_value) + "string length 4611686018427387904 exceeds"},
      {"array of 2^60 numbers", [=](Image& f) { patch<uint64_t>(f, numbers_value + 4, uint64_t{1} << 60); },
       ErrorCode::invalid_file,
       "key 'test.numbers' array length" + at(numbers_value + 4) + "array of 1152921504606846976 elements of 4 bytes"},
      {"array of 2^60 strings", [=](Image& f) { patch<uint64_t>(f, words_value + 4, uint64_t{1} << 60); },
       ErrorCode::invalid_file, "array of 1152921504606846976 strings cannot fit"},
      {"unknown value type", [=](Image& f) { patch<uint32_t>(f, value_type_at(f, "test.count"), 13); },
       ErrorCode::invalid_file, "key 'test.count' value type" + at(count_value - 4) + "unknown value type id 13"},
      {"nested array", [=](Image& f) { patch<uint32_t>(f, numbers_value, 9); }, ErrorCode::invalid_file,
       "key 'test.numbers' array element type" + at(numbers_value) + "nested arrays"},
      {"unknown array element type", [=](Image& f) { patch<uint32_t>(f, numbers_value, 77); }, ErrorCode::invalid_file,
       "unknown value type id 77"},
      {"bad bool byte", [=](Image& f) { patch<uint8_t>(f, flag_value, 2); }, ErrorCode::invalid_file,
       "key 'test.flag' value" + at(flag_value) + "bool byte is 2, expected 0 or 1"},
      {"alignment not u32", [=](Image& f) { patch<uint32_t>(f, alignment_value - 4, 5); }, ErrorCode::invalid_file,
       "key 'general.alignment' value" + at(alignment_value) + "is i32, expected u32"},
      {"alignment zero", [=](Image& f) { patch<uint32_t>(f, alignment_value, 0); }, ErrorCode::invalid_file,
       "alignment 0 is not a power of two"},
      {"alignment 48", [=](Image& f) { patch<uint32_t>(f, alignment_value, 48); }, ErrorCode::invalid_file,
       "alignment 48 is not a power of two"},
      {"empty key", [=](Image& f) { patch<uint64_t>(f, first_key, 0); }, ErrorCode::invalid_file,
       "metadata entry #0 key" + at(first_key) + "empty key"},
      {"duplicate key", [=](Image& f) { std::memcpy(f.data() + words_value - 14, "test.count", 10); },
       ErrorCode::invalid_file, "key 'test.count' entry" + at(words_value - 22) + "duplicate key"},
      {"duplicate tensor", [=](Image& f) { f[n_dims_at(f, "tensor.b") - 1] = std::byte{'a'}; }, ErrorCode::invalid_file,
       "tensor 'tensor.a' name" + at(n_dims_at(good, "tensor.b") - 16) + "duplicate tensor"},
      {"empty tensor name", [=](Image& f) { patch<uint64_t>(f, n_dims_at(f, "tensor.a") - 16, 0); },
       ErrorCode::invalid_file, "tensor info #0 name" + at(n_dims_at(good, "tensor.a") - 16) + "empty tensor name"},
      {"unknown ggml type", [=](Image& f) { patch<uint32_t>(f, type_at(f, "tensor.b"), 99); }, ErrorCode::invalid_file,
       "tensor 'tensor.b' type" + at(type_at(good, "tensor.b")) + "ggml type id 99 is not a ggml type"},
      {"removed ggml type", [=](Image& f) { patch<uint32_t>(f, type_at(f, "tensor.b"), 4); }, ErrorCode::invalid_file,
       "ggml type id 4 was removed from ggml"},
      {"n_dims 5", [=](Image& f) { patch<uint32_t>(f, n_dims_at(f, "tensor.a"), 5); }, ErrorCode::invalid_file,
       "tensor 'tensor.a' n_dims" + at(n_dims_at(good, "tensor.a")) + "n_dims is 5, expected 1..4"},
      {"n_dims 0", [=](Image& f) { patch<uint32_t>(f, n_dims_at(f, "tensor.a"), 0); }, ErrorCode::invalid_file,
       "n_dims is 0"},
      {"zero dimension", [=](Image& f) { patch<uint64_t>(f, ne_at(f, "tensor.a", 1), 0); }, ErrorCode::invalid_file,
       "tensor 'tensor.a' ne[1]" + at(ne_at(good, "tensor.a", 1)) + "dimension is 0"},
      {"dimension above INT64_MAX", [=](Image& f) { patch<uint64_t>(f, ne_at(f, "tensor.a", 0), uint64_t{1} << 63); },
       ErrorCode::invalid_file, "dimension 9223372036854775808 exceeds INT64_MAX"},
      {"element count overflow",
       [=](Image& f) {
         patch<uint64_t>(f, ne_at(f, "tensor.a", 0), uint64_t{1} << 32);
         patch<uint64_t>(f, ne_at(f, "tensor.a", 1), uint64_t{1} << 32);
       },
       ErrorCode::invalid_file, "tensor 'tensor.a' ne[1]" + at(ne_at(good, "tensor.a", 1)) + "element count overflows"},
      {"byte size overflow",
       [=](Image& f) {
         patch<uint64_t>(f, ne_at(f, "tensor.a", 0), uint64_t{1} << 32);
         patch<uint64_t>(f, ne_at(f, "tensor.a", 1), uint64_t{1} << 30);
       },
       ErrorCode::invalid_file, "data size in bytes overflows"},
      {"row not a whole number of blocks", [=](Image& f) { patch<uint64_t>(f, b_ne0, 33); }, ErrorCode::invalid_file,
       "tensor 'tensor.b' ne[0]" + at(b_ne0) + "row of 33 values is not a multiple of q8_0's block of 32"},
      {"misaligned tensor offset", [=](Image& f) { patch<uint64_t>(f, c_offset, 97); }, ErrorCode::invalid_file,
       "tensor 'tensor.c' offset" + at(c_offset) + "data offset 97 is not a multiple of the alignment (32 bytes)"},
      {"tensor data beyond the file", [=](Image& f) { patch<uint64_t>(f, c_offset, uint64_t{1} << 40); },
       ErrorCode::invalid_file, "16 bytes at data offset 1099511627776 extend past the end of the file"},
      {"tensor offset that overflows", [=](Image& f) { patch<uint64_t>(f, c_offset, ~uint64_t{31}); },
       ErrorCode::invalid_file, "extend past the end of the file"},
      {"tensors at the same offset", [=](Image& f) { patch<uint64_t>(f, offset_at(f, "tensor.b"), 0); },
       ErrorCode::invalid_file,
       "tensor 'tensor.b' data" + at(offset_at(good, "tensor.b")) +
           "bytes [0, 34) of the data section overlap tensor "
           "'tensor.a' at [0, 32)"},
      {"partly overlapping tensors", [=](Image& f) { patch<uint64_t>(f, c_offset, 64); }, ErrorCode::invalid_file,
       "bytes [64, 80) of the data section overlap tensor 'tensor.b' at [32, 66)"},
      {"data section cut off after the tensor infos", [=](Image& f) { f.resize(c_offset + 8); },
       ErrorCode::invalid_file, "tensor 'tensor.a' data"},
  };
}

}  // namespace

TEST_CASE("gguf reader rejects each corrupt file of the catalogue with its specific error") {
  const Image good = valid_image();
  REQUIRE_NOTHROW(File::from_bytes(good));
  const auto cases = catalogue(good);
  CHECK(cases.size() >= 25);
  for (const auto& c : cases) {
    CAPTURE(c.name);
    Image bad = good;
    c.corrupt(bad);
    try {
      (void)File::from_bytes(bad, "corrupt.gguf");
      FAIL_CHECK("accepted: " << c.name);
    } catch (const latte::Error& e) {
      const std::string message = e.what();
      CAPTURE(message);
      CHECK(e.code() == c.code);
      CHECK(message.rfind("corrupt.gguf: ", 0) == 0);
      CHECK(message.find(c.message) != std::string::npos);
      CHECK(message.find("byte offset") != std::string::npos);
    }
  }
}

TEST_CASE("gguf reader accepts version 2 files, which share v3's little-endian layout") {
  Image image = valid_image();
  patch<uint32_t>(image, 4, 2);
  const auto f = File::from_bytes(image);
  CHECK(f.version() == 2);
  CHECK(f.tensors().size() == 3);
  CHECK(f.get<std::string>("general.architecture") == "deepseek2");
}

TEST_CASE("gguf reader accepts a file without tensors that ends right after its metadata") {
  Writer w;
  w.set("general.architecture", "deepseek2");
  Image image = w.write_to_memory({});
  const size_t end = value_at(image, "general.architecture") + 8 + 9;  // no padding after the last value
  image.resize(end);
  const auto f = File::from_bytes(image);
  CHECK(f.tensors().empty());
  CHECK(f.data_offset() == (end + 31) / 32 * 32);
}

TEST_CASE("gguf reader survives truncation at every byte and random byte changes") {
  const Image good = valid_image();
  size_t touched = 0;
  const auto parse = [&](const Image& image) {
    try {
      const auto f = File::from_bytes(image);
      // Touch everything a caller may touch: lookups and every tensor's bytes.
      for (const auto& kv : f.metadata()) touched += f.find(kv.key) != nullptr;
      for (const auto& t : f.tensors()) {
        for (std::byte b : f.tensor_data(t)) touched += static_cast<size_t>(b);
      }
      return 1;
    } catch (const latte::Error&) {
      return 0;
    }
  };
  size_t accepted = 0;
  for (size_t size = 0; size < good.size(); ++size) {
    CAPTURE(size);
    accepted += parse(Image(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(size)));
  }
  // Only cuts inside the padding after the last tensor (tensor.c: 16 bytes at data offset 96) keep
  // every tensor's bytes in the file.
  const uint64_t last_tensor_end = File::from_bytes(good).data_offset() + 96 + 16;
  CHECK(accepted == good.size() - last_tensor_end);

  std::random_device device;
  const uint64_t seed = (uint64_t{device()} << 32) | device();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  constexpr uint64_t extremes[] = {0, 1, 31, 32, 0xffffffffull, uint64_t{1} << 31, uint64_t{1} << 62, ~uint64_t{0}};
  int rejected = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    Image image = good;
    const int n_changes = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < n_changes; ++k) {
      const size_t offset = rng() % image.size();
      switch (rng() % 3) {
        case 0:
          image[offset] ^= static_cast<std::byte>(1u << (rng() % 8));
          break;
        case 1:
          image[offset] = static_cast<std::byte>(rng());
          break;
        default:
          if (offset + 8 <= image.size()) patch<uint64_t>(image, offset, extremes[rng() % std::size(extremes)]);
      }
    }
    rejected += 1 - parse(image);
  }
  CHECK(rejected > 0);
  CHECK(touched > 0);
}

TEST_CASE("gguf reader reports the earliest repetition among several duplicate keys") {
  latte::test::GgufBytes b;
  b.raw("GGUF").u32(3).u64(0).u64(5);
  for (const char* key : {"k.b", "k.a", "k.c", "k.a", "k.b"}) b.str(key).u32(4).u32(1);
  // Each entry: u64 length, 3 key bytes, u32 type, u32 value = 19 bytes; entry #3 starts at 24 + 3 * 19.
  CHECK_THROWS_WITH(File::from_bytes(b.bytes, "dup.gguf"),
                    "dup.gguf: key 'k.a' entry at byte offset 81: duplicate key (first defined by metadata entry #1)");
}
