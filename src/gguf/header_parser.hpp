// Parses and validates the header of a GGUF v2/v3 image: metadata, tensor infos, data offset. Every
// count, length, dimension and offset is checked against the bytes actually present before it is
// used, so memory stays proportional to the input's size whatever the input claims.
//
//   ParsedHeader h = parse_header(bytes, "model.gguf");   // throws Error(invalid_file | unsupported)
//   const TensorInfo& t = h.tensors[*h.tensor_index.find("output.weight")];
#pragma once

#include <latte/gguf.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace latte::gguf {

/// Name -> position lookup by binary search over sorted names. Unlike a hash table, its worst case
/// stays O(log n) whatever names a hostile file chooses (no collision flooding).
class NameIndex {
 public:
  void reserve(size_t n) { entries_.reserve(n); }
  /// Records `name` at `position`; the view must outlive the index.
  void add(std::string_view name, size_t position) { entries_.emplace_back(name, position); }
  /// Sorts the names. When some name was added twice, returns the positions (first, second) of the
  /// duplicate whose second occurrence comes earliest.
  std::optional<std::pair<size_t, size_t>> sort_and_find_duplicate();
  /// Position of `name`, or nullopt. Valid after sort_and_find_duplicate.
  [[nodiscard]] std::optional<size_t> find(std::string_view name) const noexcept;

 private:
  std::vector<std::pair<std::string_view, size_t>> entries_;
};

/// Everything a GGUF header says, validated.
struct ParsedHeader {
  uint32_t version = 0;
  uint32_t alignment = 32;          ///< bytes; general.alignment or 32
  uint64_t data_offset = 0;         ///< absolute byte offset of the data section
  std::vector<KeyValue> metadata;   ///< in file order
  std::vector<TensorInfo> tensors;  ///< in file order
  /// Key -> index into metadata. The views point into the parsed image: valid while it lives.
  NameIndex key_index;
  /// Tensor name -> index into tensors. Views into the parsed image, as key_index.
  NameIndex tensor_index;
};

/// Parses `bytes` (a whole GGUF file). `name` (the path) starts every error message. Throws
/// Error(invalid_file) naming the field (key or tensor) and byte offset at fault, or
/// Error(unsupported) for GGUF v1 and big-endian files. Memory use is at most a small multiple of
/// the file size (a string array takes 32 bytes per element of at least 8 file bytes); should even
/// that fail, Error(out_of_memory).
ParsedHeader parse_header(std::span<const std::byte> bytes, const std::string& name);

}  // namespace latte::gguf
