// Parses and validates the header of a GGUF v2/v3 image: metadata, tensor infos, data offset. Every
// count, length, dimension and offset is checked against the bytes actually present before it is
// used, so memory stays proportional to the input's size whatever the input claims.
//
//   ParsedHeader h = parse_header(bytes, "model.gguf");   // throws Error(invalid_file | unsupported)
//   const TensorInfo& t = h.tensors[h.tensor_index.at("output.weight")];
#pragma once

#include <latte/gguf.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace latte::gguf {

/// Everything a GGUF header says, validated.
struct ParsedHeader {
  uint32_t version = 0;
  uint32_t alignment = 32;          ///< bytes; general.alignment or 32
  uint64_t data_offset = 0;         ///< absolute byte offset of the data section
  std::vector<KeyValue> metadata;   ///< in file order
  std::vector<TensorInfo> tensors;  ///< in file order
  /// Key -> index into metadata. The views point into the parsed image: valid while it lives.
  std::unordered_map<std::string_view, size_t> key_index;
  /// Tensor name -> index into tensors. Views into the parsed image, as key_index.
  std::unordered_map<std::string_view, size_t> tensor_index;
};

/// Parses `bytes` (a whole GGUF file). `name` (the path) starts every error message. Throws
/// Error(invalid_file) naming the field (key or tensor) and byte offset at fault, or
/// Error(unsupported) for GGUF v1 and big-endian files.
ParsedHeader parse_header(std::span<const std::byte> bytes, const std::string& name);

}  // namespace latte::gguf
