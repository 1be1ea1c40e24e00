// A small safetensors writer for tests: builds the JSON header by hand (independently of the reader
// under test), so tests can write tiny checkpoints and deliberately malformed files.
//
//   latte::test::SafetensorsWriter w; w.add_f32("model.norm.weight", {64}, values);
//   w.write(dir.file("model.safetensors"));
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace latte::test {

/// float -> bfloat16 bits, round to nearest even (NaN kept quiet).
uint16_t to_bf16_bits(float f);
/// float -> IEEE half bits, round to nearest even.
uint16_t to_f16_bits(float f);

class SafetensorsWriter {
 public:
  /// Adds a tensor with raw little-endian `data` (its size is not checked: tests may lie on purpose).
  void add_raw(std::string name, std::string dtype, std::vector<uint64_t> shape, std::vector<std::byte> data);
  /// Adds an F32 tensor.
  void add_f32(std::string name, std::vector<uint64_t> shape, std::span<const float> values);
  /// Adds a BF16 tensor (values rounded to bfloat16).
  void add_bf16(std::string name, std::vector<uint64_t> shape, std::span<const float> values);
  /// Adds an F16 tensor (values rounded to half).
  void add_f16(std::string name, std::vector<uint64_t> shape, std::span<const float> values);
  /// Sets a __metadata__ entry.
  void set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

  /// The whole file: 8-byte header length, JSON header padded with spaces to 8 bytes, data.
  [[nodiscard]] std::vector<std::byte> image() const;
  /// Writes image() to `path`.
  void write(const std::string& path) const;
  /// Names of the tensors added so far, in order.
  [[nodiscard]] std::vector<std::string> names() const;

 private:
  struct Entry {
    std::string name, dtype;
    std::vector<uint64_t> shape;
    std::vector<std::byte> data;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

/// A file made of an arbitrary header text and data bytes, with `declared_length` in the 8-byte
/// prefix (default: the header's real length). For malformed-file tests.
std::vector<std::byte> safetensors_image(const std::string& header, std::span<const std::byte> data,
                                         int64_t declared_length = -1);

/// Writes bytes to a file. Throws std::runtime_error on failure.
void write_binary_file(const std::string& path, std::span<const std::byte> bytes);

}  // namespace latte::test
