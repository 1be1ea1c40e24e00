// latte::gguf::File: a memory-mapped, validated GGUF file and typed metadata lookups.
#include "gguf/file_mapping.hpp"
#include "gguf/header_parser.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>

#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

namespace latte::gguf {

struct File::Impl {
  std::string path;
  std::optional<FileMapping> mapping;  // set by open()
  std::vector<std::byte> owned_bytes;  // set by from_bytes()
  std::span<const std::byte> bytes;    // the whole file image
  ParsedHeader header;                 // its index views point into `bytes`
};

File::File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

File File::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->mapping.emplace(path);
  impl->bytes = impl->mapping->bytes();
  impl->header = parse_header(impl->bytes, path);
  return File(std::move(impl));
}

File File::from_bytes(std::span<const std::byte> bytes, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->path = std::move(name);
  impl->owned_bytes.assign(bytes.begin(), bytes.end());
  impl->bytes = impl->owned_bytes;
  impl->header = parse_header(impl->bytes, impl->path);
  return File(std::move(impl));
}

const std::string& File::path() const noexcept { return impl_->path; }
uint32_t File::version() const noexcept { return impl_->header.version; }
uint64_t File::file_size() const noexcept { return impl_->bytes.size(); }
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
  return impl_->bytes.subspan(impl_->header.data_offset + tensor.offset, tensor.n_bytes);
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
