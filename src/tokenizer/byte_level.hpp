// The byte-level alphabet of GPT-2-style BPE: every byte 0..255 is written as one printable code
// point (printable Latin-1 bytes stand for themselves, the rest map to U+0100.. in byte order), so
// token texts are valid UTF-8 whatever bytes they cover.
//
//   std::string text = latte::tokenizer::bytes_to_byte_level(" hi");   // "Ġhi"
//   auto bytes = latte::tokenizer::byte_level_to_bytes("Ġhi");          // " hi"
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace latte::tokenizer {

/// The code point that stands for byte `b`.
char32_t byte_to_code_point(uint8_t b) noexcept;
/// The byte that code point `cp` stands for, or -1 if `cp` is not in the alphabet.
int code_point_to_byte(char32_t cp) noexcept;
/// Writes every byte of `bytes` as its alphabet code point (UTF-8).
std::string bytes_to_byte_level(std::string_view bytes);
/// The bytes a byte-level text stands for, or nullopt when `text` is not valid UTF-8 or holds a
/// code point outside the alphabet.
std::optional<std::string> byte_level_to_bytes(std::string_view text);

}  // namespace latte::tokenizer
