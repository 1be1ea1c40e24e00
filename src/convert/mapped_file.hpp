// A read-only memory mapping of a checkpoint file (RAII), with the two page-cache hints a streaming
// converter needs: read ahead sequentially, and drop a range once it has been consumed so that the
// resident set stays bounded while a 400 GB checkpoint streams through.
//
//   latte::convert::MappedFile shard("model-00001-of-00163.safetensors");
//   std::span<const std::byte> bytes = shard.bytes();
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace latte::convert {

/// Maps `path` read-only. Throws Error(not_found) when the file does not exist and Error(io) naming
/// the path and the system's reason when it cannot be opened or mapped. An empty file maps to an
/// empty span.
class MappedFile {
 public:
  explicit MappedFile(std::string path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  /// The whole file; valid while the mapping lives.
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

  /// Tells the kernel that `range` (inside bytes()) is no longer needed: its pages leave the resident
  /// set (they stay in the page cache only if memory allows). Never fails; a bad range is ignored.
  void release(std::span<const std::byte> range) const noexcept;

 private:
  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;  // bytes
};

}  // namespace latte::convert
