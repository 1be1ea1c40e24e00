#include "chat/python_text.hpp"

#include <cstdint>

namespace latte::chat {
namespace {

bool is_python_space(uint32_t cp) {
  if (cp >= 0x09 && cp <= 0x0D) return true;  // \t \n \v \f \r
  if (cp >= 0x1C && cp <= 0x20) return true;  // file/group/record/unit separators, space
  if (cp == 0x85 || cp == 0xA0 || cp == 0x1680) return true;
  if (cp >= 0x2000 && cp <= 0x200A) return true;
  return cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Decodes the code point starting at `pos`; sets `length` to its byte count. Invalid UTF-8 decodes
// as a one-byte non-space (Python would never see it: the text came through a UTF-8 decoder).
uint32_t decode_at(std::string_view text, size_t pos, size_t& length) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  const size_t need = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
  if (need == 0 || pos + need > text.size()) {
    length = 1;
    return 0xFFFFFFFFu;
  }
  uint32_t cp = need == 1 ? b0 : need == 2 ? (b0 & 0x1Fu) : need == 3 ? (b0 & 0x0Fu) : (b0 & 0x07u);
  for (size_t i = 1; i < need; ++i) {
    const auto b = static_cast<unsigned char>(text[pos + i]);
    if ((b & 0xC0) != 0x80) {
      length = 1;
      return 0xFFFFFFFFu;
    }
    cp = (cp << 6) | (b & 0x3Fu);
  }
  length = need;
  return cp;
}

// Start of the code point that ends just before `end`.
size_t previous_start(std::string_view text, size_t end) {
  size_t start = end - 1;
  size_t steps = 1;
  while (start > 0 && steps < 4 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start, ++steps;
  size_t length = 0;
  decode_at(text, start, length);
  return start + length == end ? start : end - 1;
}

}  // namespace

std::string_view python_strip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t length = 0;
    if (!is_python_space(decode_at(text, begin, length))) break;
    begin += length;
  }
  size_t end = text.size();
  while (end > begin) {
    const size_t start = previous_start(text, end);
    size_t length = 0;
    if (!is_python_space(decode_at(text, start, length))) break;
    end = start;
  }
  return text.substr(begin, end - begin);
}

std::string_view lstrip_chars(std::string_view text, std::string_view chars) {
  const size_t begin = text.find_first_not_of(chars);
  return begin == std::string_view::npos ? std::string_view() : text.substr(begin);
}

std::string_view rstrip_chars(std::string_view text, std::string_view chars) {
  const size_t last = text.find_last_not_of(chars);
  return last == std::string_view::npos ? std::string_view() : text.substr(0, last + 1);
}

std::string_view before_first(std::string_view text, std::string_view sep) {
  const size_t at = text.find(sep);
  return at == std::string_view::npos ? text : text.substr(0, at);
}

std::string_view after_last(std::string_view text, std::string_view sep) {
  const size_t at = text.rfind(sep);
  return at == std::string_view::npos ? text : text.substr(at + sep.size());
}

}  // namespace latte::chat
