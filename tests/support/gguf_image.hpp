// Helpers for GGUF tests: a hand encoder of GGUF bytes (independent of latte's writer), byte patching,
// and the search for a field inside an image.
//
//   latte::test::GgufBytes b; b.raw("GGUF"); b.u32(3); b.u64(0); b.u64(1); b.str("k"); b.u32(4); b.u32(7);
//   auto file = latte::gguf::File::from_bytes(b.bytes);
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

namespace latte::test {

/// Appends little-endian GGUF encodings.
struct GgufBytes {
  std::vector<std::byte> bytes;

  /// Appends `n` raw bytes.
  GgufBytes& append(const void* data, size_t n);
  template <class T>
  GgufBytes& scalar(T v) {
    return append(&v, sizeof(T));
  }
  GgufBytes& u8(uint8_t v) { return scalar(v); }
  GgufBytes& u32(uint32_t v) { return scalar(v); }
  GgufBytes& u64(uint64_t v) { return scalar(v); }
  /// Raw bytes of `text`, no length.
  GgufBytes& raw(std::string_view text) { return append(text.data(), text.size()); }
  /// A GGUF string: u64 length, then the bytes.
  GgufBytes& str(std::string_view text) { return u64(text.size()).raw(text); }
  /// Zero bytes up to the next multiple of `alignment`.
  GgufBytes& pad(size_t alignment) {
    bytes.resize((bytes.size() + alignment - 1) / alignment * alignment, std::byte{0});
    return *this;
  }
};

/// Byte offset of the first occurrence of `needle` in `image` at or after `from`; throws when absent.
size_t find_text(std::span<const std::byte> image, std::string_view needle, size_t from = 0);

/// Byte offset just after the GGUF string whose text is `text` (its u64 length precedes it).
inline size_t after_string(std::span<const std::byte> image, std::string_view text) {
  return find_text(image, text) + text.size();
}

/// Overwrites sizeof(T) bytes at `offset`.
template <class T>
void patch(std::vector<std::byte>& image, size_t offset, T value) {
  std::memcpy(image.data() + offset, &value, sizeof(T));
}

/// Reads sizeof(T) bytes at `offset`.
template <class T>
T peek(std::span<const std::byte> image, size_t offset) {
  T value;
  std::memcpy(&value, image.data() + offset, sizeof(T));
  return value;
}

}  // namespace latte::test
