#include "support/gguf_image.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace latte::test {

GgufBytes& GgufBytes::append(const void* data, size_t n) {
  const auto* first = static_cast<const std::byte*>(data);
  bytes.insert(bytes.end(), first, first + n);
  return *this;
}

size_t find_text(std::span<const std::byte> image, std::string_view needle, size_t from) {
  const auto* begin = reinterpret_cast<const char*>(image.data());
  const std::string_view haystack(begin, image.size());
  const size_t at = haystack.find(needle, from);
  if (at == std::string_view::npos) throw std::logic_error("test image lacks '" + std::string(needle) + "'");
  return at;
}

}  // namespace latte::test
