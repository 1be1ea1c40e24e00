// Unicode properties and UTF-8 decoding for the tokenizer: General_Category and White_Space from
// generated tables (tools/unicode/gen_tables.py), and a UTF-8 decoder that never fails.
//
//   auto props = latte::unicode::properties(U'é');            // bit for Ll set
//   bool letter = props & latte::unicode::letter_mask;
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace latte::unicode {

/// Unicode General_Category values. The order is fixed by tools/unicode/gen_tables.py.
enum class Category : uint8_t {
  Cn,
  Lu,
  Ll,
  Lt,
  Lm,
  Lo,
  Mn,
  Mc,
  Me,
  Nd,
  Nl,
  No,
  Pc,
  Pd,
  Ps,
  Pe,
  Pi,
  Pf,
  Po,
  Sm,
  Sc,
  Sk,
  So,
  Zs,
  Zl,
  Zp,
  Cc,
  Cf,
  Cs,
  Co,
};
inline constexpr unsigned category_count = 30;

/// A property set is a bit mask: bit `c` for General_Category c, plus white_space_bit.
using Properties = uint32_t;
inline constexpr Properties white_space_bit = 1u << 30;

constexpr Properties category_bit(Category c) { return 1u << static_cast<unsigned>(c); }
constexpr Properties letter_mask = category_bit(Category::Lu) | category_bit(Category::Ll) |
                                   category_bit(Category::Lt) | category_bit(Category::Lm) | category_bit(Category::Lo);
constexpr Properties mark_mask = category_bit(Category::Mn) | category_bit(Category::Mc) | category_bit(Category::Me);
constexpr Properties number_mask = category_bit(Category::Nd) | category_bit(Category::Nl) | category_bit(Category::No);
constexpr Properties punctuation_mask =
    category_bit(Category::Pc) | category_bit(Category::Pd) | category_bit(Category::Ps) | category_bit(Category::Pe) |
    category_bit(Category::Pi) | category_bit(Category::Pf) | category_bit(Category::Po);
constexpr Properties symbol_mask =
    category_bit(Category::Sm) | category_bit(Category::Sc) | category_bit(Category::Sk) | category_bit(Category::So);
constexpr Properties separator_mask =
    category_bit(Category::Zs) | category_bit(Category::Zl) | category_bit(Category::Zp);
constexpr Properties other_mask = category_bit(Category::Cc) | category_bit(Category::Cf) | category_bit(Category::Cs) |
                                  category_bit(Category::Co) | category_bit(Category::Cn);

/// The General_Category of `cp` (Cn for unassigned code points and anything above U+10FFFF).
Category category(char32_t cp) noexcept;
/// Whether `cp` has the White_Space property.
bool is_white_space(char32_t cp) noexcept;
/// category_bit(category(cp)) | (is_white_space(cp) ? white_space_bit : 0).
Properties properties(char32_t cp) noexcept;
/// The property mask for a \p{...} name: one- or two-letter category names ("L", "Lu", "N", ...)
/// and their long forms ("Letter", "Number", ...). Returns 0 for an unknown name.
Properties properties_for_name(std::string_view name) noexcept;
/// The Unicode version the tables were generated from ("15.0.0").
const char* tables_version() noexcept;

/// The code point substituted for a byte that does not start a valid UTF-8 sequence.
inline constexpr char32_t replacement_character = 0xFFFD;

/// Decodes one code point from `text` at byte `pos`. Returns the code point and sets `length` to the
/// number of bytes consumed (1..4). Invalid, overlong, surrogate or truncated sequences decode as
/// U+FFFD with length 1, so every byte of any input is consumed exactly once.
char32_t decode_utf8(std::string_view text, size_t pos, size_t& length) noexcept;
/// Appends the UTF-8 encoding of `cp` (which must be <= U+10FFFF) to `out`.
void append_utf8(std::string& out, char32_t cp);
/// Length in bytes of the valid UTF-8 sequence announced by lead byte `b` (1..4), or 0 for a
/// continuation or invalid lead byte.
constexpr size_t utf8_sequence_length(uint8_t b) noexcept {
  if (b < 0x80) return 1;
  if (b < 0xC2) return 0;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  if (b < 0xF5) return 4;
  return 0;
}

/// A text decoded for matching: one entry per code point (invalid bytes become U+FFFD).
struct DecodedText {
  std::vector<char32_t> code_points;   ///< [n] code points
  std::vector<Properties> props;       ///< [n] properties(code_points[i])
  std::vector<uint32_t> byte_offsets;  ///< [n + 1] byte offset of code point i in the source; last = size
  /// Decodes `text` (any bytes) into this object, reusing its storage.
  void assign(std::string_view text);
  [[nodiscard]] size_t size() const noexcept { return code_points.size(); }
};

// Generated tables (unicode_tables.cpp).
namespace tables {
struct CategoryRun {
  uint32_t first;    ///< first code point of the run
  uint8_t category;  ///< Category value
};
struct CodePointRange {
  uint32_t first, last;  ///< inclusive
};
extern const char* const unicode_version;
extern const CategoryRun category_runs[];
extern const unsigned category_run_count;
extern const CodePointRange white_space_ranges[];
extern const unsigned white_space_range_count;
}  // namespace tables

}  // namespace latte::unicode
