// Metadata values and tensor descriptions: names, conversions, shape text.
#include <latte/gguf.hpp>

#include <cstdint>
#include <limits>
#include <type_traits>

namespace latte::gguf {

std::string_view value_type_name(ValueType type) noexcept {
  switch (type) {
    case ValueType::u8:
      return "u8";
    case ValueType::i8:
      return "i8";
    case ValueType::u16:
      return "u16";
    case ValueType::i16:
      return "i16";
    case ValueType::u32:
      return "u32";
    case ValueType::i32:
      return "i32";
    case ValueType::f32:
      return "f32";
    case ValueType::boolean:
      return "bool";
    case ValueType::string:
      return "string";
    case ValueType::array:
      return "array";
    case ValueType::u64:
      return "u64";
    case ValueType::i64:
      return "i64";
    case ValueType::f64:
      return "f64";
  }
  return "unknown";
}

size_t Array::size() const noexcept {
  return std::visit([](const auto& v) { return v.size(); }, values);
}

static_assert(std::is_same_v<std::variant_alternative_t<4, Value::Storage>, uint32_t> &&
                  std::is_same_v<std::variant_alternative_t<9, Value::Storage>, Array> &&
                  std::is_same_v<std::variant_alternative_t<12, Value::Storage>, double>,
              "Value::Storage alternatives must be declared in ValueType order");

ValueType Value::type() const noexcept {
  // The alternatives of Storage are declared in ValueType order.
  return static_cast<ValueType>(storage_.index());
}

std::optional<int64_t> Value::as_int() const noexcept {
  return std::visit(
      [](const auto& v) -> std::optional<int64_t> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool> || !std::is_integral_v<T>) {
          return std::nullopt;
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
          return static_cast<int64_t>(v);
        } else {
          return static_cast<int64_t>(v);
        }
      },
      storage_);
}

std::optional<double> Value::as_number() const noexcept {
  return std::visit(
      [](const auto& v) -> std::optional<double> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool> || !std::is_arithmetic_v<T>) {
          return std::nullopt;
        } else {
          return static_cast<double>(v);
        }
      },
      storage_);
}

std::string TensorInfo::shape_string() const {
  std::string text = "[";
  for (uint32_t d = 0; d < n_dims; ++d) {
    if (d) text += ", ";
    text += std::to_string(ne[d]);
  }
  return text + "]";
}

}  // namespace latte::gguf
