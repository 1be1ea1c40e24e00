// GPT-2 byte <-> code point alphabet.
#include "tokenizer/byte_level.hpp"

#include "tokenizer/unicode.hpp"

#include <array>
#include <cstdint>

namespace latte::tokenizer {

namespace {

bool stands_for_itself(unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); }

struct Alphabet {
  std::array<char32_t, 256> code_point{};  // byte -> code point
  std::array<int16_t, 324> byte{};         // code point (< 0x144) -> byte, -1 if none
  Alphabet() {
    byte.fill(-1);
    unsigned next = 0;
    for (unsigned b = 0; b < 256; ++b) {
      const char32_t cp = stands_for_itself(b) ? b : 0x100 + next++;
      code_point[b] = cp;
      byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

char32_t byte_to_code_point(uint8_t b) noexcept { return alphabet().code_point[b]; }

int code_point_to_byte(char32_t cp) noexcept { return cp < 324 ? alphabet().byte[cp] : -1; }

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) unicode::append_utf8(out, byte_to_code_point(static_cast<uint8_t>(c)));
  return out;
}

std::optional<std::string> byte_level_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t length = 1;
    const char32_t cp = unicode::decode_utf8(text, pos, length);
    if (cp == unicode::replacement_character && length == 1 && static_cast<uint8_t>(text[pos]) >= 0x80) {
      return std::nullopt;  // invalid UTF-8
    }
    const int b = code_point_to_byte(cp);
    if (b < 0) return std::nullopt;
    out += static_cast<char>(b);
    pos += length;
  }
  return out;
}

}  // namespace latte::tokenizer
