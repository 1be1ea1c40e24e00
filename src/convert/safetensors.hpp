// Reader for Hugging Face safetensors checkpoints: one file, or a folder sharded through
// model.safetensors.index.json. Files are memory-mapped; nothing is copied and every header field
// (length, dtype, shape, data_offsets) is validated against the file before it is used.
//
//   auto ckpt = latte::safetensors::Checkpoint::open("DeepSeek-V2-Lite/");
//   const latte::safetensors::TensorView& t = ckpt.at("model.embed_tokens.weight");
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace latte::safetensors {

/// Element types latte reads from safetensors files (the names are the file format's).
enum class Dtype : uint8_t { f64, f32, f16, bf16, f8_e4m3, f8_e5m2, i64, i32, i16, i8, u8, boolean };

/// The file format's name of a dtype ("BF16", "F8_E4M3", ...).
std::string_view dtype_name(Dtype dtype) noexcept;
/// Bytes per element.
uint32_t dtype_size(Dtype dtype) noexcept;
/// Parses a dtype name. Throws Error(unsupported) for dtypes of the format latte does not read
/// (U16, U32, U64, F8_E8M0, F4, ...) and Error(invalid_file) for names the format does not define;
/// `context` (file and tensor) prefixes the message.
Dtype parse_dtype(std::string_view name, const std::string& context);

/// The largest header latte accepts, in bytes (the header is JSON; real ones are a few MB).
inline constexpr uint64_t max_header_bytes = 100'000'000;

/// One tensor of a file. `bytes` points into the file's mapping (not necessarily aligned).
struct TensorView {
  std::string name;
  Dtype dtype = Dtype::f32;
  std::vector<uint64_t> shape;  ///< outermost first, as torch writes it (the last dim is contiguous)
  uint64_t n_elements = 0;      ///< product of shape (1 for a scalar)
  std::span<const std::byte> bytes;
  const std::string* file = nullptr;  ///< path of the file holding it (for messages)

  /// Shape as text, e.g. "[2048, 7168]".
  [[nodiscard]] std::string shape_string() const;
};

/// One parsed .safetensors file. Move-only; TensorViews stay valid while the File lives.
class File {
 public:
  /// Maps and parses `path`. Throws Error(not_found)/Error(io) when it cannot be read and
  /// Error(invalid_file) naming the file, tensor and field when the content is malformed.
  static File open(const std::string& path);
  /// Parses an in-memory image (tests). `name` stands for the path in messages.
  static File from_bytes(std::vector<std::byte> image, std::string name = "<memory>");

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  [[nodiscard]] const std::string& path() const noexcept;
  /// Tensors in data-offset order.
  [[nodiscard]] std::span<const TensorView> tensors() const noexcept;
  /// The tensor named `name`, or nullptr.
  [[nodiscard]] const TensorView* find(std::string_view name) const noexcept;
  /// The optional "__metadata__" string map.
  [[nodiscard]] const std::map<std::string, std::string>& metadata() const noexcept;
  /// Drops the pages of `tensor`'s bytes from the resident set (see gguf::FileMapping::release).
  void release(const TensorView& tensor) const noexcept;

 private:
  struct Impl;
  explicit File(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// A Hugging Face checkpoint folder: model.safetensors.index.json with its shards, or a single
/// model*.safetensors file. Tensor names are unique across shards.
class Checkpoint {
 public:
  /// Opens `folder`. Throws Error(not_found) when it holds no safetensors file, and
  /// Error(invalid_file) when the index is malformed, names a missing shard or a tensor its shard
  /// lacks, or when a shard holds a tensor the index does not list.
  static Checkpoint open(const std::string& folder);
  /// A checkpoint made of already-parsed files (tests).
  static Checkpoint from_files(std::vector<File> files);

  /// The tensor named `name`, or nullptr.
  [[nodiscard]] const TensorView* find(std::string_view name) const noexcept;
  /// The tensor named `name`; throws Error(not_found) naming it and the checkpoint.
  [[nodiscard]] const TensorView& at(std::string_view name) const;
  /// Every tensor, shard by shard.
  [[nodiscard]] std::vector<const TensorView*> tensors() const;
  [[nodiscard]] const std::string& folder() const noexcept { return folder_; }
  /// Total bytes of tensor data.
  [[nodiscard]] uint64_t data_bytes() const noexcept;
  /// Drops `tensor`'s pages from the resident set.
  void release(const TensorView& tensor) const noexcept;

 private:
  std::string folder_;
  std::vector<File> files_;
  std::unordered_map<std::string_view, std::pair<size_t, const TensorView*>> index_;  // name -> (file, tensor)
  void build_index();
};

}  // namespace latte::safetensors
