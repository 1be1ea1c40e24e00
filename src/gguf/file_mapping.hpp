// A read-only memory mapping of a whole file (RAII). Used by the GGUF reader: nothing is read from
// disk until a page is touched, so parsing the header of a 400 GB file reads only the header.
//
//   latte::gguf::FileMapping map("model.gguf");
//   std::span<const std::byte> bytes = map.bytes();
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace latte::gguf {

/// Maps `path` read-only. Throws Error(io) naming the path and the system's reason on failure.
/// An empty file gives an empty span (no mapping).
class FileMapping {
 public:
  explicit FileMapping(const std::string& path);
  FileMapping(FileMapping&& other) noexcept;
  FileMapping& operator=(FileMapping&& other) noexcept;
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;
  ~FileMapping();

  /// The whole file's bytes; valid while the mapping lives.
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }

 private:
  const std::byte* data_ = nullptr;
  size_t size_ = 0;  // bytes
};

}  // namespace latte::gguf
