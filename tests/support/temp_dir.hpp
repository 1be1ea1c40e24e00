// A fresh directory under the system temp dir, removed with everything in it when the object dies.
//
//   latte::test::TempDir dir;
//   std::string path = dir.file("model.safetensors");
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace latte::test {

class TempDir {
 public:
  TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();

  /// The directory's path.
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// path() + "/" + name.
  [[nodiscard]] std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// Writes `text` to `path` (replacing it). Throws std::runtime_error on failure.
void write_text_file(const std::string& path, const std::string& text);
/// The whole file at `path`, as text or as bytes. Throws std::runtime_error when it cannot be read.
std::string read_text_file(const std::string& path);
std::vector<std::byte> read_binary_file(const std::string& path);

}  // namespace latte::test
