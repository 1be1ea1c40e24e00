// GGUF header parsing, written as a parser of hostile input. The layout (all little-endian):
//
//   "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count    x { string key | u32 value_type | value }
//   tensor_count x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to general.alignment (default 32) | data section (tensor offsets are relative to it)
//
//   string = u64 length | bytes (no terminator);  array = u32 element_type | u64 count | elements
//
// Before anything is allocated, counts and lengths are compared with the bytes left in the image, so
// a claim of 2^60 elements costs nothing. Each failure names the field and its byte offset.
#include "gguf/header_parser.hpp"

#include <latte/error.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <numeric>

namespace latte::gguf {
namespace {

constexpr uint64_t no_index = std::numeric_limits<uint64_t>::max();
constexpr uint32_t max_value_type = static_cast<uint32_t>(ValueType::f64);

// Smallest encodings, used to bound counts by the bytes left before anything is reserved.
constexpr uint64_t min_kv_bytes = 8 + 4 + 1;                   // key length, type, a u8 value
constexpr uint64_t min_tensor_info_bytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, ne[0], type, offset

// What is being read, for error messages; cheap to build (no allocation) because the hot loops
// (130k vocabulary strings) build one per element.
struct Field {
  std::string_view subject_kind = {};  // "key", "tensor", "metadata entry", "tensor info" or empty
  std::string_view subject = {};       // the key or tensor name, when known
  uint64_t subject_index = no_index;   // entry number when the name is not known yet
  std::string_view what = {};          // "value", "array length", "ne", ...
  uint64_t what_index = no_index;      // array element or dimension number
};

std::string describe(const Field& f) {
  std::string text;
  if (!f.subject_kind.empty()) {
    text += f.subject_kind;
    if (f.subject_index != no_index) {
      text += " #" + std::to_string(f.subject_index);
    } else {
      text += " '";
      text += f.subject;
      text += "'";
    }
    text += " ";
  }
  text += f.what;
  if (f.what_index != no_index)
    text += (f.what == "ne" ? "[" + std::to_string(f.what_index) + "]" : " " + std::to_string(f.what_index));
  return text;
}

std::string printable_bytes(std::span<const std::byte> bytes) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string text;
  for (std::byte b : bytes) {
    const auto c = static_cast<unsigned char>(b);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      text += static_cast<char>(c);
    } else {
      text += "\\x";
      text += hex[c >> 4];
      text += hex[c & 15];
    }
  }
  return text;
}

// Faults in the pages of a large fresh allocation with one system call, instead of one trap per
// page as the parser fills it. Only a hint: kernels without MADV_POPULATE_WRITE (before 5.14) ignore it.
void prefault(const void* data, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  constexpr size_t worth_it = size_t{1} << 20;  // bytes
  if (bytes < worth_it) return;
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#else
  (void)data;
  (void)bytes;
#endif
}

class HeaderParser {
 public:
  HeaderParser(std::span<const std::byte> bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  ParsedHeader run() {
    ParsedHeader header;
    read_preamble(header);
    read_metadata(header);
    read_tensor_infos(header);
    place_data(header);
    return header;
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& name_;
  uint64_t pos_ = 0;  // byte offset of the next read
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  std::vector<uint64_t> kv_at_;            // per metadata entry: byte offset where it starts
  std::vector<uint64_t> tensor_info_at_;   // per tensor: byte offset where its info starts
  std::vector<uint64_t> offset_field_at_;  // per tensor: byte offset of its `offset` field

  [[nodiscard]] uint64_t remaining() const { return bytes_.size() - pos_; }

  [[noreturn]] void fail(uint64_t at, const Field& field, const std::string& problem,
                         ErrorCode code = ErrorCode::invalid_file) const {
    throw Error(code, name_ + ": " + describe(field) + " at byte offset " + std::to_string(at) + ": " + problem);
  }

  void need(uint64_t n, const Field& field) const {
    if (n > remaining()) {
      fail(pos_, field,
           "file truncated: needs " + std::to_string(n) + " bytes, " + std::to_string(remaining()) + " left (file is " +
               std::to_string(bytes_.size()) + " bytes)");
    }
  }

  template <class T>
  T read(const Field& field) {
    need(sizeof(T), field);
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  // A string's bytes as a view into the image. `field.what` names the string ("key", "name", ...).
  std::string_view read_string(const Field& field) {
    const uint64_t at = pos_;
    const uint64_t length = read<uint64_t>(field);
    if (length > remaining()) {
      fail(at, field,
           "string length " + std::to_string(length) + " exceeds the " + std::to_string(remaining()) +
               " bytes left in the file");
    }
    std::string_view text(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<size_t>(length));
    pos_ += length;
    return text;
  }

  ValueType read_value_type(const Field& field, bool element) {
    const uint64_t at = pos_;
    const auto raw = read<uint32_t>(field);
    if (raw > max_value_type) fail(at, field, "unknown value type id " + std::to_string(raw));
    if (element && raw == static_cast<uint32_t>(ValueType::array)) {
      fail(at, field, "nested arrays (an array of arrays) are not part of GGUF");
    }
    return static_cast<ValueType>(raw);
  }

  bool read_bool(const Field& field) {
    const uint64_t at = pos_;
    const auto byte = read<uint8_t>(field);
    if (byte > 1) fail(at, field, "bool byte is " + std::to_string(byte) + ", expected 0 or 1");
    return byte == 1;
  }

  void read_preamble(ParsedHeader& header) {
    need(4, {.what = "magic"});
    if (std::memcmp(bytes_.data(), "GGUF", 4) != 0) {
      fail(0, {.what = "magic"},
           "not a GGUF file: starts with '" + printable_bytes(bytes_.first(4)) + "', expected 'GGUF'");
    }
    pos_ = 4;
    const auto version = read<uint32_t>({.what = "version"});
    if (version == 1) {
      fail(4, {.what = "version"}, "GGUF version 1 (32-bit counts) is not supported; convert the file to v3",
           ErrorCode::unsupported);
    }
    if (version == 0x02000000u || version == 0x03000000u) {
      fail(4, {.what = "version"}, "big-endian GGUF files are not supported", ErrorCode::unsupported);
    }
    if (version != 2 && version != 3) {
      fail(4, {.what = "version"}, "unknown GGUF version " + std::to_string(version) + " (latte reads 2 and 3)");
    }
    header.version = version;

    n_tensors_ = read<uint64_t>({.what = "tensor count"});
    n_kv_ = read<uint64_t>({.what = "metadata count"});
    // Both sections follow: each entry takes at least its minimal encoding.
    if (n_tensors_ > remaining() / min_tensor_info_bytes) {
      fail(8, {.what = "tensor count"},
           std::to_string(n_tensors_) + " tensors cannot fit in the " + std::to_string(remaining()) +
               " bytes left (each tensor info takes at least " + std::to_string(min_tensor_info_bytes) + ")");
    }
    if (n_kv_ > remaining() / min_kv_bytes) {
      fail(16, {.what = "metadata count"},
           std::to_string(n_kv_) + " key/value pairs cannot fit in the " + std::to_string(remaining()) +
               " bytes left (each takes at least " + std::to_string(min_kv_bytes) + ")");
    }
  }

  template <class T>
  Array read_fixed_array(uint64_t count, const Field& field, uint64_t count_at) {
    if (count > remaining() / sizeof(T)) {
      fail(count_at, field,
           "array of " + std::to_string(count) + " elements of " + std::to_string(sizeof(T)) + " bytes exceeds the " +
               std::to_string(remaining()) + " bytes left in the file");
    }
    std::vector<T> values(static_cast<size_t>(count));
    if (count) std::memcpy(values.data(), bytes_.data() + pos_, static_cast<size_t>(count) * sizeof(T));
    pos_ += count * sizeof(T);
    return Array(std::move(values));
  }

  Array read_array(std::string_view key) {
    const ValueType element_type = read_value_type({"key", key, no_index, "array element type"}, true);
    const uint64_t count_at = pos_;
    const Field count_field{"key", key, no_index, "array length"};
    const auto count = read<uint64_t>(count_field);
    switch (element_type) {
      case ValueType::u8:
        return read_fixed_array<uint8_t>(count, count_field, count_at);
      case ValueType::i8:
        return read_fixed_array<int8_t>(count, count_field, count_at);
      case ValueType::u16:
        return read_fixed_array<uint16_t>(count, count_field, count_at);
      case ValueType::i16:
        return read_fixed_array<int16_t>(count, count_field, count_at);
      case ValueType::u32:
        return read_fixed_array<uint32_t>(count, count_field, count_at);
      case ValueType::i32:
        return read_fixed_array<int32_t>(count, count_field, count_at);
      case ValueType::f32:
        return read_fixed_array<float>(count, count_field, count_at);
      case ValueType::u64:
        return read_fixed_array<uint64_t>(count, count_field, count_at);
      case ValueType::i64:
        return read_fixed_array<int64_t>(count, count_field, count_at);
      case ValueType::f64:
        return read_fixed_array<double>(count, count_field, count_at);
      case ValueType::boolean: {
        if (count > remaining()) {
          fail(count_at, count_field,
               "array of " + std::to_string(count) + " bools exceeds the " + std::to_string(remaining()) +
                   " bytes left in the file");
        }
        std::vector<bool> values(static_cast<size_t>(count));
        for (uint64_t i = 0; i < count; ++i) values[i] = read_bool({"key", key, no_index, "element", i});
        return Array(std::move(values));
      }
      case ValueType::string: {
        if (count > remaining() / sizeof(uint64_t)) {
          fail(count_at, count_field,
               "array of " + std::to_string(count) + " strings cannot fit in the " + std::to_string(remaining()) +
                   " bytes left (each takes at least 8)");
        }
        std::vector<std::string> values;
        values.reserve(static_cast<size_t>(count));
        prefault(values.data(), values.capacity() * sizeof(std::string));
        for (uint64_t i = 0; i < count; ++i) values.emplace_back(read_string({"key", key, no_index, "element", i}));
        return Array(std::move(values));
      }
      case ValueType::array:
        break;  // rejected by read_value_type
    }
    fail(count_at, count_field, "internal: unhandled element type");
  }

  Value read_value(ValueType type, std::string_view key) {
    const Field field{"key", key, no_index, "value"};
    switch (type) {
      case ValueType::u8:
        return Value(read<uint8_t>(field));
      case ValueType::i8:
        return Value(read<int8_t>(field));
      case ValueType::u16:
        return Value(read<uint16_t>(field));
      case ValueType::i16:
        return Value(read<int16_t>(field));
      case ValueType::u32:
        return Value(read<uint32_t>(field));
      case ValueType::i32:
        return Value(read<int32_t>(field));
      case ValueType::f32:
        return Value(read<float>(field));
      case ValueType::boolean:
        return Value(read_bool(field));
      case ValueType::string:
        return Value(std::string(read_string(field)));
      case ValueType::array:
        return Value(read_array(key));
      case ValueType::u64:
        return Value(read<uint64_t>(field));
      case ValueType::i64:
        return Value(read<int64_t>(field));
      case ValueType::f64:
        return Value(read<double>(field));
    }
    fail(pos_, field, "internal: unhandled value type");
  }

  // Keys whose type the format itself depends on.
  void check_well_known(ParsedHeader& header, std::string_view key, const Value& value, uint64_t value_at) {
    const Field field{"key", key, no_index, "value"};
    if (key == "general.alignment") {
      const auto* alignment = value.get_if<uint32_t>();
      if (!alignment) fail(value_at, field, "is " + type_text(value) + ", expected u32");
      if (*alignment == 0 || (*alignment & (*alignment - 1)) != 0) {
        fail(value_at, field, "alignment " + std::to_string(*alignment) + " is not a power of two");
      }
      header.alignment = *alignment;
    } else if (key == "general.architecture") {
      if (!value.get_if<std::string>()) fail(value_at, field, "is " + type_text(value) + ", expected string");
    }
  }

  static std::string type_text(const Value& value) {
    if (const auto* array = value.get_if<Array>()) {
      return "array of " + std::string(value_type_name(array->element_type));
    }
    return std::string(value_type_name(value.type()));
  }

  void read_metadata(ParsedHeader& header) {
    header.metadata.reserve(static_cast<size_t>(n_kv_));
    header.key_index.reserve(static_cast<size_t>(n_kv_));
    kv_at_.reserve(static_cast<size_t>(n_kv_));
    for (uint64_t i = 0; i < n_kv_; ++i) {
      const uint64_t entry_at = pos_;
      const Field key_field{"metadata entry", {}, i, "key"};
      const std::string_view key = read_string(key_field);
      if (key.empty()) fail(entry_at, key_field, "empty key");
      header.key_index.add(key, header.metadata.size());
      kv_at_.push_back(entry_at);
      const ValueType type = read_value_type({"key", key, no_index, "value type"}, false);
      const uint64_t value_at = pos_;
      Value value = read_value(type, key);
      check_well_known(header, key, value, value_at);
      header.metadata.push_back({std::string(key), std::move(value)});
    }
    if (const auto duplicate = header.key_index.sort_and_find_duplicate()) {
      const auto [first, second] = *duplicate;
      fail(kv_at_[second], {"key", header.metadata[second].key, no_index, "entry"},
           "duplicate key (first defined by metadata entry #" + std::to_string(first) + ")");
    }
  }

  void read_tensor_infos(ParsedHeader& header) {
    header.tensors.reserve(static_cast<size_t>(n_tensors_));
    header.tensor_index.reserve(static_cast<size_t>(n_tensors_));
    offset_field_at_.reserve(static_cast<size_t>(n_tensors_));
    tensor_info_at_.reserve(static_cast<size_t>(n_tensors_));
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      const uint64_t info_at = pos_;
      const Field name_field{"tensor info", {}, i, "name"};
      const std::string_view name = read_string(name_field);
      if (name.empty()) fail(info_at, name_field, "empty tensor name");
      header.tensor_index.add(name, header.tensors.size());
      tensor_info_at_.push_back(info_at);
      TensorInfo tensor;
      tensor.name = std::string(name);

      const uint64_t dims_at = pos_;
      const Field dims_field{"tensor", name, no_index, "n_dims"};
      tensor.n_dims = read<uint32_t>(dims_field);
      if (tensor.n_dims == 0 || tensor.n_dims > max_dims) {
        fail(dims_at, dims_field,
             "n_dims is " + std::to_string(tensor.n_dims) + ", expected 1.." + std::to_string(max_dims));
      }
      uint64_t n_elements = 1;
      for (uint32_t d = 0; d < tensor.n_dims; ++d) {
        const uint64_t ne_at = pos_;
        const Field ne_field{"tensor", name, no_index, "ne", d};
        const auto ne = read<uint64_t>(ne_field);
        if (ne == 0) fail(ne_at, ne_field, "dimension is 0");
        if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          fail(ne_at, ne_field, "dimension " + std::to_string(ne) + " exceeds INT64_MAX");
        }
        if (__builtin_mul_overflow(n_elements, ne, &n_elements) ||
            n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          fail(ne_at, ne_field, "element count overflows (product of dimensions exceeds INT64_MAX)");
        }
        tensor.ne[d] = ne;
      }

      const uint64_t type_at = pos_;
      const Field type_field{"tensor", name, no_index, "type"};
      const auto raw_type = read<uint32_t>(type_field);
      const auto layout = find_type_traits(raw_type);
      if (!layout) {
        try {
          (void)type_traits(static_cast<GgmlType>(raw_type));  // explains why the id is rejected
        } catch (const Error& e) {
          fail(type_at, type_field, e.what());
        }
        fail(type_at, type_field, "ggml type id " + std::to_string(raw_type) + " is unknown");
      }
      tensor.type = static_cast<GgmlType>(raw_type);
      if (tensor.ne[0] % layout->block_values != 0) {
        fail(dims_at + sizeof(uint32_t), {"tensor", name, no_index, "ne", 0},
             "row of " + std::to_string(tensor.ne[0]) + " values is not a multiple of " + std::string(layout->name) +
                 "'s block of " + std::to_string(layout->block_values));
      }
      uint64_t row_bytes = 0;
      uint64_t n_bytes = 0;
      if (__builtin_mul_overflow(tensor.ne[0] / layout->block_values, uint64_t{layout->block_bytes}, &row_bytes) ||
          __builtin_mul_overflow(row_bytes, tensor.n_rows(), &n_bytes)) {
        fail(dims_at, dims_field, "data size in bytes overflows 64 bits");
      }
      tensor.n_bytes = n_bytes;

      offset_field_at_.push_back(pos_);
      const Field offset_field{"tensor", name, no_index, "offset"};
      const uint64_t offset_at = pos_;
      tensor.offset = read<uint64_t>(offset_field);
      if (tensor.offset % header.alignment != 0) {
        fail(offset_at, offset_field,
             "data offset " + std::to_string(tensor.offset) + " is not a multiple of the alignment (" +
                 std::to_string(header.alignment) + " bytes)");
      }
      header.tensors.push_back(std::move(tensor));
    }
    if (const auto duplicate = header.tensor_index.sort_and_find_duplicate()) {
      const auto [first, second] = *duplicate;
      fail(tensor_info_at_[second], {"tensor", header.tensors[second].name, no_index, "name"},
           "duplicate tensor name (first defined by tensor info #" + std::to_string(first) + ")");
    }
  }

  // Fixes the data section's start and checks that every tensor's bytes lie inside the file and
  // that no two tensors share a byte.
  void place_data(ParsedHeader& header) {
    header.data_offset = (pos_ + header.alignment - 1) / header.alignment * header.alignment;
    const uint64_t file_size = bytes_.size();
    const uint64_t data_size = file_size > header.data_offset ? file_size - header.data_offset : 0;
    for (size_t i = 0; i < header.tensors.size(); ++i) {
      const TensorInfo& t = header.tensors[i];
      if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
        fail(offset_field_at_[i], {"tensor", t.name, no_index, "data"},
             std::to_string(t.n_bytes) + " bytes at data offset " + std::to_string(t.offset) +
                 " extend past the end of the file (the data section starts at byte offset " +
                 std::to_string(header.data_offset) + " and holds " + std::to_string(data_size) + " bytes)");
      }
    }
    std::vector<size_t> order(header.tensors.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      // Ties keep file order, so the later of two tensors at one offset is the one reported.
      const uint64_t oa = header.tensors[a].offset, ob = header.tensors[b].offset;
      return oa != ob ? oa < ob : a < b;
    });
    for (size_t k = 1; k < order.size(); ++k) {
      const TensorInfo& before = header.tensors[order[k - 1]];
      const TensorInfo& t = header.tensors[order[k]];
      if (before.offset + before.n_bytes > t.offset) {
        fail(offset_field_at_[order[k]], {"tensor", t.name, no_index, "data"},
             "bytes [" + std::to_string(t.offset) + ", " + std::to_string(t.offset + t.n_bytes) +
                 ") of the data section overlap tensor '" + before.name + "' at [" + std::to_string(before.offset) +
                 ", " + std::to_string(before.offset + before.n_bytes) + ")");
      }
    }
  }
};

}  // namespace

std::optional<std::pair<size_t, size_t>> NameIndex::sort_and_find_duplicate() {
  std::sort(entries_.begin(), entries_.end());  // by name, then position
  std::optional<std::pair<size_t, size_t>> duplicate;
  for (size_t i = 1; i < entries_.size(); ++i) {
    // Equal names sit together, ordered by position: the first of a run is the original and the
    // second is that name's earliest repetition.
    const bool repeats = entries_[i].first == entries_[i - 1].first;
    const bool second_of_run = repeats && (i == 1 || entries_[i - 2].first != entries_[i].first);
    if (second_of_run && (!duplicate || entries_[i].second < duplicate->second)) {
      duplicate.emplace(entries_[i - 1].second, entries_[i].second);
    }
  }
  return duplicate;
}

std::optional<size_t> NameIndex::find(std::string_view name) const noexcept {
  const auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                                   [](const auto& entry, std::string_view n) { return entry.first < n; });
  if (it == entries_.end() || it->first != name) return std::nullopt;
  return it->second;
}

ParsedHeader parse_header(std::span<const std::byte> bytes, const std::string& name) {
  try {
    return HeaderParser(bytes, name).run();
  } catch (const std::bad_alloc&) {
    // Counts are bounded by the file size, so this needs a header of several times the free memory.
    throw Error(ErrorCode::out_of_memory, name + ": out of memory while reading the GGUF header (file is " +
                                              std::to_string(bytes.size()) + " bytes)");
  }
}

}  // namespace latte::gguf
