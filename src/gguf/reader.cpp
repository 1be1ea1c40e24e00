// latte::gguf::File: a memory-mapped, validated GGUF file and typed metadata lookups.
#include "gguf/file_mapping.hpp"
#include "gguf/header_parser.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <type_traits>
#include <utility>

namespace latte::gguf {

struct File::Impl {
  std::string path;
  std::optional<FileMapping> mapping;  // set by open()
  std::vector<std::byte> owned_bytes;  // set by from_bytes()
  std::span<const std::byte> bytes;    // the whole file image
  ParsedHeader header;                 // its index views point into `bytes` (or the splits' names)
  std::vector<File> splits;            // a split model's other files, split.no 1, 2, ...
};

File::File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

namespace {

// llama.cpp's split names: PREFIX-%05d-of-%05d.gguf, numbered from 1.
std::string split_suffix(uint32_t number, uint32_t count) {
  char text[48];
  std::snprintf(text, sizeof text, "-%05u-of-%05u.gguf", number + 1, count);
  return text;
}

// The split number and count a file states (1 file: count 1).
std::pair<uint32_t, uint32_t> split_of(const File& file) {
  if (!file.find("split.count")) return {0, 1};
  const auto count = file.get<uint32_t>("split.count");
  const auto number = file.get_or<uint32_t>("split.no", 0);
  if (count == 0 || number >= count) {
    throw Error(ErrorCode::invalid_file, file.path() + ": split.no " + std::to_string(number) + " of split.count " +
                                             std::to_string(count) + " is not a split of the model");
  }
  return {number, count};
}

}  // namespace

File File::open_one(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->mapping.emplace(path);
  impl->bytes = impl->mapping->bytes();
  impl->header = parse_header(impl->bytes, path);
  return File(std::move(impl));
}

File File::open(const std::string& path) {
  File file = open_one(path);
  file.open_other_splits();
  return file;
}

void File::open_other_splits() {
  Impl& m = *impl_;
  const auto [number, count] = split_of(*this);
  if (count == 1) return;
  const std::string suffix = split_suffix(number, count);
  const bool named = m.path.size() > suffix.size() && m.path.ends_with(suffix);
  const std::string prefix = named ? m.path.substr(0, m.path.size() - suffix.size()) : std::string();
  if (number != 0) {
    throw Error(ErrorCode::invalid_argument,
                m.path + " is split " + std::to_string(number + 1) + " of " + std::to_string(count) +
                    " of a split model: open its first file" +
                    (named ? ", " + prefix + split_suffix(0, count) : std::string(" (split.no 0)")));
  }
  if (!named) {
    throw Error(ErrorCode::invalid_file, m.path + ": split 1 of " + std::to_string(count) +
                                             " (split.count), but its name does not end in " + suffix +
                                             ", which would name the other splits");
  }
  for (uint32_t i = 1; i < count; ++i) {
    File split = open_one(prefix + split_suffix(i, count));
    if (split_of(split) != std::pair{i, count}) {
      const auto [n, c] = split_of(split);
      throw Error(ErrorCode::invalid_file, split.path() + ": states split " + std::to_string(n + 1) + " of " +
                                               std::to_string(c) + " where split " + std::to_string(i + 1) + " of " +
                                               std::to_string(count) + " was expected");
    }
    for (TensorInfo t : split.tensors()) {
      t.split = i;
      m.header.tensors.push_back(std::move(t));
    }
    m.splits.push_back(std::move(split));
  }
  // The index, again over every file's names (views into the tensors' own names from here on).
  NameIndex index;
  index.reserve(m.header.tensors.size());
  for (size_t i = 0; i < m.header.tensors.size(); ++i) index.add(m.header.tensors[i].name, i);
  if (const auto duplicate = index.sort_and_find_duplicate()) {
    const TensorInfo& a = m.header.tensors[duplicate->first];
    const TensorInfo& b = m.header.tensors[duplicate->second];
    throw Error(ErrorCode::invalid_file, m.path + ": tensor '" + a.name + "' is in split " +
                                             std::to_string(a.split + 1) + " and in split " +
                                             std::to_string(b.split + 1));
  }
  m.header.tensor_index = std::move(index);
  if (find("split.tensors.count")) {
    const auto expected = get<uint64_t>("split.tensors.count");
    if (expected != m.header.tensors.size()) {
      throw Error(ErrorCode::invalid_file, m.path + ": split.tensors.count is " + std::to_string(expected) +
                                               " but the " + std::to_string(count) + " splits hold " +
                                               std::to_string(m.header.tensors.size()) + " tensors");
    }
  }
}

File File::from_bytes(std::span<const std::byte> bytes, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->path = std::move(name);
  impl->owned_bytes.assign(bytes.begin(), bytes.end());
  impl->bytes = impl->owned_bytes;
  impl->header = parse_header(impl->bytes, impl->path);
  File file(std::move(impl));
  if (const auto [number, count] = split_of(file); count > 1) {
    throw Error(ErrorCode::unsupported, file.path() + ": split " + std::to_string(number + 1) + " of " +
                                            std::to_string(count) +
                                            " of a split model; the other splits cannot be opened from memory");
  }
  return file;
}

const std::string& File::path() const noexcept { return impl_->path; }
uint32_t File::version() const noexcept { return impl_->header.version; }
uint64_t File::file_size() const noexcept {
  uint64_t bytes = impl_->bytes.size();
  for (const File& split : impl_->splits) bytes += split.file_size();
  return bytes;
}
uint32_t File::split_count() const noexcept { return 1 + static_cast<uint32_t>(impl_->splits.size()); }
uint32_t File::alignment() const noexcept { return impl_->header.alignment; }
uint64_t File::data_offset() const noexcept { return impl_->header.data_offset; }

std::span<const KeyValue> File::metadata() const noexcept { return impl_->header.metadata; }

const Value* File::find(std::string_view key) const noexcept {
  const auto position = impl_->header.key_index.find(key);
  return position ? &impl_->header.metadata[*position].value : nullptr;
}

std::span<const TensorInfo> File::tensors() const noexcept { return impl_->header.tensors; }

const TensorInfo* File::find_tensor(std::string_view name) const noexcept {
  const auto position = impl_->header.tensor_index.find(name);
  return position ? &impl_->header.tensors[*position] : nullptr;
}

std::span<const std::byte> File::tensor_data(const TensorInfo& tensor) const noexcept {
  // Offsets and sizes were checked against the file size when the header was parsed.
  if (tensor.split > impl_->splits.size()) return {};
  const Impl& m = tensor.split == 0 ? *impl_ : *impl_->splits[tensor.split - 1].impl_;
  return m.bytes.subspan(m.header.data_offset + tensor.offset, tensor.n_bytes);
}

namespace {

std::string stored_type_text(const Value& value) {
  if (const auto* array = value.get_if<Array>()) {
    return "array of " + std::string(value_type_name(array->element_type));
  }
  return std::string(value_type_name(value.type()));
}

template <class T>
std::string requested_type_text() {
  if constexpr (std::is_same_v<T, Array>) {
    return "array";
  } else {
    return std::string(value_type_name(value_type_of<T>()));
  }
}

[[noreturn]] void throw_missing(const std::string& path, std::string_view key) {
  throw Error(ErrorCode::not_found, path + ": metadata key '" + std::string(key) + "' not found");
}

[[noreturn]] void throw_wrong_type(const std::string& path, std::string_view key, const Value& value,
                                   const std::string& expected) {
  throw Error(ErrorCode::invalid_file, path + ": metadata key '" + std::string(key) + "' is " +
                                           stored_type_text(value) + ", expected " + expected);
}

const Array& array_or_throw(const File& file, const Value* value, std::string_view key, ValueType element_type) {
  if (!value) throw_missing(file.path(), key);
  const auto* array = value->get_if<Array>();
  if (!array || array->element_type != element_type) {
    throw_wrong_type(file.path(), key, *value, "array of " + std::string(value_type_name(element_type)));
  }
  return *array;
}

}  // namespace

template <class T>
T File::get(std::string_view key) const {
  const Value* value = find(key);
  if (!value) throw_missing(impl_->path, key);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // Any integer type whose value fits in T.
    std::optional<T> result;
    bool integral = false;
    std::visit(
        [&](const auto& v) {
          using S = std::decay_t<decltype(v)>;
          if constexpr (std::is_integral_v<S> && !std::is_same_v<S, bool>) {
            integral = true;
            if (std::in_range<T>(v)) result = static_cast<T>(v);
          }
        },
        value->storage());
    if (!integral) throw_wrong_type(impl_->path, key, *value, requested_type_text<T>());
    if (!result) {
      const auto wide = value->as_int();
      throw Error(ErrorCode::invalid_file,
                  impl_->path + ": metadata key '" + std::string(key) + "' holds " + stored_type_text(*value) + " " +
                      (wide ? std::to_string(*wide) : std::to_string(*value->get_if<uint64_t>())) +
                      ", which does not fit in " + requested_type_text<T>());
    }
    return *result;
  } else if constexpr (std::is_floating_point_v<T>) {
    if (const auto* f = value->get_if<float>()) return static_cast<T>(*f);
    if (const auto* d = value->get_if<double>()) return static_cast<T>(*d);
    throw_wrong_type(impl_->path, key, *value, requested_type_text<T>());
  } else {
    const T* typed = value->get_if<T>();
    if (!typed) throw_wrong_type(impl_->path, key, *value, requested_type_text<T>());
    return *typed;
  }
}

const std::vector<std::string>& File::get_strings(std::string_view key) const {
  const Array& array = array_or_throw(*this, find(key), key, ValueType::string);
  return std::get<std::vector<std::string>>(array.values);
}

template <class T>
std::span<const T> File::get_array(std::string_view key) const {
  static_assert(!std::is_same_v<T, bool> && !std::is_same_v<T, std::string>, "use get_array_value / get_strings");
  const Array& array = array_or_throw(*this, find(key), key, value_type_of<T>());
  return std::get<std::vector<T>>(array.values);
}

const Array& File::get_array_value(std::string_view key) const {
  const Value* value = find(key);
  if (!value) throw_missing(impl_->path, key);
  const auto* array = value->get_if<Array>();
  if (!array) throw_wrong_type(impl_->path, key, *value, "array");
  return *array;
}

template uint8_t File::get<uint8_t>(std::string_view) const;
template int8_t File::get<int8_t>(std::string_view) const;
template uint16_t File::get<uint16_t>(std::string_view) const;
template int16_t File::get<int16_t>(std::string_view) const;
template uint32_t File::get<uint32_t>(std::string_view) const;
template int32_t File::get<int32_t>(std::string_view) const;
template uint64_t File::get<uint64_t>(std::string_view) const;
template int64_t File::get<int64_t>(std::string_view) const;
template float File::get<float>(std::string_view) const;
template double File::get<double>(std::string_view) const;
template bool File::get<bool>(std::string_view) const;
template std::string File::get<std::string>(std::string_view) const;

template std::span<const uint8_t> File::get_array<uint8_t>(std::string_view) const;
template std::span<const int8_t> File::get_array<int8_t>(std::string_view) const;
template std::span<const uint16_t> File::get_array<uint16_t>(std::string_view) const;
template std::span<const int16_t> File::get_array<int16_t>(std::string_view) const;
template std::span<const uint32_t> File::get_array<uint32_t>(std::string_view) const;
template std::span<const int32_t> File::get_array<int32_t>(std::string_view) const;
template std::span<const uint64_t> File::get_array<uint64_t>(std::string_view) const;
template std::span<const int64_t> File::get_array<int64_t>(std::string_view) const;
template std::span<const float> File::get_array<float>(std::string_view) const;
template std::span<const double> File::get_array<double>(std::string_view) const;

}  // namespace latte::gguf
