// GGUF v2/v3 reader and writer. The reader memory-maps the file and never copies tensor data; every
// count, length, dimension and offset is validated against the file size before it is used.
//
//   auto f = latte::gguf::File::open("model.gguf");
//   uint32_t n_layer = f.get<uint32_t>("deepseek2.block_count");
#pragma once

#include <latte/quant.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

namespace latte::gguf {

/// Metadata value type ids, fixed by the file format.
enum class ValueType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

/// Name of a value type ("u32", "string", ...).
std::string_view value_type_name(ValueType type) noexcept;

/// The ValueType that stores a C++ type T (u32 for uint32_t, string for std::string, ...).
template <class T>
constexpr ValueType value_type_of() noexcept {
  if constexpr (std::is_same_v<T, uint8_t>)
    return ValueType::u8;
  else if constexpr (std::is_same_v<T, int8_t>)
    return ValueType::i8;
  else if constexpr (std::is_same_v<T, uint16_t>)
    return ValueType::u16;
  else if constexpr (std::is_same_v<T, int16_t>)
    return ValueType::i16;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return ValueType::u32;
  else if constexpr (std::is_same_v<T, int32_t>)
    return ValueType::i32;
  else if constexpr (std::is_same_v<T, float>)
    return ValueType::f32;
  else if constexpr (std::is_same_v<T, bool>)
    return ValueType::boolean;
  else if constexpr (std::is_same_v<T, std::string>)
    return ValueType::string;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return ValueType::u64;
  else if constexpr (std::is_same_v<T, int64_t>)
    return ValueType::i64;
  else if constexpr (std::is_same_v<T, double>)
    return ValueType::f64;
  else
    static_assert(sizeof(T) == 0, "not a GGUF value type");
}

/// A homogeneous metadata array. Arrays of arrays are not part of GGUF and are rejected.
///
///   latte::gguf::Array tokens(std::vector<std::string>{"<s>", "</s>"});   // element_type string
struct Array {
  using Values =
      std::variant<std::vector<uint8_t>, std::vector<int8_t>, std::vector<uint16_t>, std::vector<int16_t>,
                   std::vector<uint32_t>, std::vector<int32_t>, std::vector<float>, std::vector<bool>,
                   std::vector<std::string>, std::vector<uint64_t>, std::vector<int64_t>, std::vector<double>>;
  /// Must name the type held by `values` (the writer checks; the reader guarantees it).
  ValueType element_type = ValueType::u8;
  Values values;

  Array() = default;
  /// An array of the elements of `v`, with the matching element_type.
  template <class T>
  explicit Array(std::vector<T> v) : element_type(value_type_of<T>()), values(std::move(v)) {}
  /// Number of elements.
  [[nodiscard]] size_t size() const noexcept;
  /// Same element type and elements (floats compare as floats: NaN != NaN).
  bool operator==(const Array&) const = default;
};

/// One metadata value.
class Value {
 public:
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string, Array,
                               uint64_t, int64_t, double>;
  Value() = default;
  /// A value of the type that stores T (uint32_t -> u32, std::string -> string, Array -> array).
  template <class T>
  explicit Value(T v) : storage_(std::move(v)) {}
  /// A string value.
  explicit Value(const char* s) : storage_(std::string(s)) {}
  /// The stored type.
  [[nodiscard]] ValueType type() const noexcept;
  [[nodiscard]] const Storage& storage() const noexcept { return storage_; }
  /// Typed access; nullptr when the stored type is not exactly T.
  template <class T>
  [[nodiscard]] const T* get_if() const noexcept {
    return std::get_if<T>(&storage_);
  }
  /// Any integer type widened to int64 (u64 above INT64_MAX gives nullopt); nullopt for non-integers.
  [[nodiscard]] std::optional<int64_t> as_int() const noexcept;
  /// Any integer or float type as double; nullopt otherwise.
  [[nodiscard]] std::optional<double> as_number() const noexcept;
  /// Same type and value.
  bool operator==(const Value&) const = default;

 private:
  Storage storage_;
};

/// One key/value pair, in file order.
struct KeyValue {
  std::string key;
  Value value;
};

/// Maximum number of dimensions a GGUF tensor may have (ggml's GGML_MAX_DIMS).
inline constexpr uint32_t max_dims = 4;

/// Description of one tensor. `ne[0]` is the contiguous (innermost) dimension, as in ggml.
struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::f32;
  uint32_t n_dims = 0;
  std::array<uint64_t, max_dims> ne{1, 1, 1, 1};  ///< unused trailing dims are 1
  uint64_t offset = 0;                            ///< byte offset relative to the start of the data section
  uint64_t n_bytes = 0;                           ///< size of the tensor's data in bytes
  uint32_t split = 0;  ///< the file of a split model that holds the data (0: the first; see File::open)

  /// Total number of elements.
  [[nodiscard]] uint64_t n_elements() const noexcept { return ne[0] * ne[1] * ne[2] * ne[3]; }
  /// Number of rows (all dims but the first).
  [[nodiscard]] uint64_t n_rows() const noexcept { return ne[1] * ne[2] * ne[3]; }
  /// Shape as text, e.g. "[512, 128, 16]".
  [[nodiscard]] std::string shape_string() const;
};

/// A parsed GGUF file. Move-only; the mapping lives as long as the File. References and spans it
/// hands out (metadata, get_strings, tensor_data) stay valid while the File lives, moves included.
/// Tensor data is read through the mapping: shrinking the file on disk while it is open makes the
/// system raise SIGBUS on access, as with any mapped file.
class File {
 public:
  /// Maps and parses `path`. Throws Error(not_found) when it does not exist, Error(io) when it cannot
  /// be opened or mapped, Error(invalid_file) naming the field (key or tensor) and byte offset when the
  /// content is malformed, and Error(unsupported) for GGUF v1 and big-endian files.
  ///
  /// A split model (llama.cpp's gguf-split: `split.count` > 1 files named PREFIX-00001-of-0000N.gguf
  /// ...) is opened from its first file: the others are mapped too, and tensors() lists every
  /// file's tensors (TensorInfo::split says which). The metadata is the first file's. Throws
  /// Error(invalid_argument) naming the first file when `path` is another split, Error(not_found)
  /// naming a missing split, and Error(invalid_file) when the splits disagree (their count or number,
  /// a tensor in two of them, split.tensors.count against the tensors found).
  static File open(const std::string& path);
  /// Parses a copy of an in-memory image (tests, fuzzing). `name` is used in error messages. A split
  /// model's first file is refused (Error(unsupported)): its other files cannot be opened from memory.
  static File from_bytes(std::span<const std::byte> bytes, std::string name = "<memory>");

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  [[nodiscard]] const std::string& path() const noexcept;
  [[nodiscard]] uint32_t version() const noexcept;
  [[nodiscard]] uint64_t file_size() const noexcept;    ///< bytes; of all the files of a split model
  [[nodiscard]] uint32_t split_count() const noexcept;  ///< files: 1, or a split model's split.count
  [[nodiscard]] uint32_t alignment() const noexcept;    ///< general.alignment or 32
  [[nodiscard]] uint64_t data_offset() const noexcept;  ///< absolute offset of the data section

  // ---- metadata ----
  [[nodiscard]] std::span<const KeyValue> metadata() const noexcept;
  /// The value for `key`, or nullptr.
  [[nodiscard]] const Value* find(std::string_view key) const noexcept;
  /// Typed lookup. Throws Error(not_found) when absent and Error(invalid_file) naming the key and
  /// both types when the stored type is not T. Integer T accept any integer type whose value fits;
  /// float and double accept f32 and f64.
  template <class T>
  [[nodiscard]] T get(std::string_view key) const;
  /// Like get, but returns `fallback` when the key is absent (a wrong type still throws).
  template <class T>
  [[nodiscard]] T get_or(std::string_view key, T fallback) const {
    return find(key) ? get<T>(key) : fallback;
  }
  /// String array lookup (tokenizer.ggml.tokens, merges): a reference to the stored vector, no copy.
  /// Throws Error(not_found) when absent, Error(invalid_file) when not an array of strings.
  [[nodiscard]] const std::vector<std::string>& get_strings(std::string_view key) const;
  /// Numeric array lookup (tokenizer.ggml.scores as float, token_type as int32_t), no copy. The
  /// element type must be exactly T. Throws like get_strings. Not for bool (use get_array_value).
  template <class T>
  [[nodiscard]] std::span<const T> get_array(std::string_view key) const;
  /// The array stored under `key`. Throws like get_strings.
  [[nodiscard]] const Array& get_array_value(std::string_view key) const;

  // ---- tensors ----
  [[nodiscard]] std::span<const TensorInfo> tensors() const noexcept;
  /// The tensor named `name`, or nullptr.
  [[nodiscard]] const TensorInfo* find_tensor(std::string_view name) const noexcept;
  /// The tensor's bytes inside the mapping (valid while the File lives).
  [[nodiscard]] std::span<const std::byte> tensor_data(const TensorInfo& tensor) const noexcept;

 private:
  struct Impl;
  explicit File(std::unique_ptr<Impl> impl);
  static File open_one(const std::string& path);
  void open_other_splits();
  std::unique_ptr<Impl> impl_;
};

// Explicit instantiations live in src/gguf/reader.cpp: get for uint8_t int8_t uint16_t int16_t uint32_t
// int32_t uint64_t int64_t float double bool std::string; get_array for the same types minus bool and
// std::string.

/// Writes GGUF v3 files. Describe all metadata and tensors first, then write; tensor data can be
/// supplied in any order and from several threads (each tensor's offset is fixed before writing).
///
///   latte::gguf::Writer w; w.set("general.architecture", std::string("deepseek2"));
///   w.add_tensor("token_embd.weight", GgmlType::f32, {64, 100}); w.write("m.gguf", fill_fn);
class Writer {
 public:
  Writer();
  ~Writer();
  Writer(Writer&&) noexcept;
  Writer& operator=(Writer&&) noexcept;

  /// Sets (or replaces) a metadata key. Order of first insertion is kept. Throws
  /// Error(invalid_argument) for an empty key, an Array whose element_type does not name the vector it
  /// holds, or a general.alignment that is not a u32 power of two (setting it changes the alignment).
  void set(std::string key, Value value);
  template <class T>
  void set(std::string key, T v) {
    set(std::move(key), Value(std::move(v)));
  }
  /// Data alignment (a power of two); also written as general.alignment when not 32.
  void set_alignment(uint32_t alignment);
  /// Declares a tensor; `ne` has 1..4 non-zero dims, ne[0] innermost and a whole number of the type's
  /// blocks. Tensors are laid out in declaration order. Throws Error(invalid_argument) on duplicates,
  /// names longer than 63 bytes (ggml's limit, so llama.cpp can load the file), or bad shapes/types.
  void add_tensor(std::string name, GgmlType type, std::span<const uint64_t> ne);
  void add_tensor(std::string name, GgmlType type, std::initializer_list<uint64_t> ne) {
    add_tensor(std::move(name), type, std::span<const uint64_t>(ne.begin(), ne.size()));
  }
  /// Declared tensors with their final offsets (valid after the last add_tensor).
  [[nodiscard]] std::span<const TensorInfo> tensors() const noexcept;

  /// Fills `dst` (exactly tensors()[index].n_bytes long) with the tensor's data.
  using Fill = std::function<void(size_t index, std::span<std::byte> dst)>;
  /// Writes the whole file: header, then every tensor's data through `fill`, using up to
  /// `n_threads` threads (each calls fill for different tensors; memory stays ~ one tensor per
  /// thread). Writes to `path + ".partial"` and renames on success; on failure the partial file is
  /// removed and an existing `path` is left untouched. An exception thrown by `fill` stops the write
  /// and is rethrown as is. Throws Error(io) when the system refuses a create, write or rename.
  void write(const std::string& path, const Fill& fill, unsigned n_threads = 1) const;
  /// Serialises the whole file into memory (tests; small files only).
  [[nodiscard]] std::vector<std::byte> write_to_memory(const Fill& fill) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace latte::gguf
