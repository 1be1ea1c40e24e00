// A read-only memory mapping of a whole file (RAII). Nothing is read from disk until a page is
// touched, so parsing the header of a 400 GB file reads only the header. Used by the GGUF reader
// (random access) and by the checkpoint converter, which streams tensors front to back: it asks for
// sequential read-ahead and drops each range once consumed so that the resident set stays bounded.
//
//   latte::gguf::FileMapping map("model.gguf");
//   std::span<const std::byte> bytes = map.bytes();
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace latte::gguf {

/// How the mapping will be read: a page-cache hint, never a correctness matter.
enum class MappingAccess {
  random,      ///< no advice: pages are read where they are touched
  sequential,  ///< front to back in large runs: aggressive read-ahead
};

/// Maps `path` read-only. Throws Error(not_found) when the file does not exist and Error(io) naming
/// the path and the failing call (open, stat, map) with the system's reason when it cannot be opened
/// or mapped. An empty file gives an empty span (no mapping).
class FileMapping {
 public:
  explicit FileMapping(const std::string& path, MappingAccess access = MappingAccess::random);
  FileMapping(FileMapping&& other) noexcept;
  FileMapping& operator=(FileMapping&& other) noexcept;
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;
  ~FileMapping();

  /// The whole file's bytes; valid while the mapping lives.
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }

  /// Tells the kernel that `range` (inside bytes()) is no longer needed: the pages it covers
  /// completely leave the resident set (they stay in the page cache only if memory allows) and are
  /// read again from the file if touched. Never fails; a range outside bytes() is ignored.
  void release(std::span<const std::byte> range) const noexcept;

 private:
  const std::byte* data_ = nullptr;
  size_t size_ = 0;  // bytes
};

}  // namespace latte::gguf
