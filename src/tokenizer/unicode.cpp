// Unicode property lookups over the generated tables, and a total UTF-8 decoder.
#include "tokenizer/unicode.hpp"

#include <algorithm>
#include <array>
#include <cstdint>

namespace latte::unicode {

namespace {

// Properties of the 128 ASCII code points, computed once from the tables (the hot path for
// English text and code).
std::array<Properties, 128> make_ascii_properties() {
  std::array<Properties, 128> out{};
  for (char32_t cp = 0; cp < 128; ++cp) {
    auto run = std::upper_bound(tables::category_runs, tables::category_runs + tables::category_run_count, cp,
                                [](char32_t c, const tables::CategoryRun& r) { return c < r.first; });
    Properties p = category_bit(static_cast<Category>((run - 1)->category));
    for (unsigned i = 0; i < tables::white_space_range_count; ++i) {
      if (cp >= tables::white_space_ranges[i].first && cp <= tables::white_space_ranges[i].last) p |= white_space_bit;
    }
    out[cp] = p;
  }
  return out;
}

const std::array<Properties, 128>& ascii_properties() {
  static const std::array<Properties, 128> table = make_ascii_properties();
  return table;
}

}  // namespace

Category category(char32_t cp) noexcept {
  if (cp > 0x10FFFF) return Category::Cn;
  // The last run whose first code point is <= cp; the first run starts at 0.
  auto run = std::upper_bound(tables::category_runs, tables::category_runs + tables::category_run_count, cp,
                              [](char32_t c, const tables::CategoryRun& r) { return c < r.first; });
  return static_cast<Category>((run - 1)->category);
}

bool is_white_space(char32_t cp) noexcept {
  const auto* end = tables::white_space_ranges + tables::white_space_range_count;
  auto range = std::upper_bound(tables::white_space_ranges, end, cp,
                                [](char32_t c, const tables::CodePointRange& r) { return c < r.first; });
  return range != tables::white_space_ranges && cp <= (range - 1)->last;
}

Properties properties(char32_t cp) noexcept {
  if (cp < 128) return ascii_properties()[cp];
  return category_bit(category(cp)) | (is_white_space(cp) ? white_space_bit : 0);
}

Properties properties_for_name(std::string_view name) noexcept {
  struct Named {
    std::string_view name;
    Properties mask;
  };
  static constexpr const char* short_names[category_count] = {
      "Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
      "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co",
  };
  for (unsigned c = 0; c < category_count; ++c) {
    if (name == short_names[c]) return 1u << c;
  }
  static constexpr Named groups[] = {
      {"L", letter_mask}, {"Letter", letter_mask}, {"M", mark_mask},        {"Mark", mark_mask},
      {"N", number_mask}, {"Number", number_mask}, {"P", punctuation_mask}, {"Punctuation", punctuation_mask},
      {"S", symbol_mask}, {"Symbol", symbol_mask}, {"Z", separator_mask},   {"Separator", separator_mask},
      {"C", other_mask},  {"Other", other_mask},
  };
  for (const auto& g : groups) {
    if (name == g.name) return g.mask;
  }
  return 0;
}

const char* tables_version() noexcept { return tables::unicode_version; }

char32_t decode_utf8(std::string_view text, size_t pos, size_t& length) noexcept {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byte(pos);
  length = 1;
  const size_t n = utf8_sequence_length(b0);
  if (n == 1) return b0;
  if (n == 0 || pos + n > text.size()) return replacement_character;
  for (size_t i = 1; i < n; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) return replacement_character;
  }
  char32_t cp = 0;
  if (n == 2) {
    cp = (char32_t(b0 & 0x1F) << 6) | (byte(pos + 1) & 0x3F);
  } else if (n == 3) {
    cp = (char32_t(b0 & 0x0F) << 12) | (char32_t(byte(pos + 1) & 0x3F) << 6) | (byte(pos + 2) & 0x3F);
    if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)) return replacement_character;  // overlong, surrogate
  } else {
    cp = (char32_t(b0 & 0x07) << 18) | (char32_t(byte(pos + 1) & 0x3F) << 12) | (char32_t(byte(pos + 2) & 0x3F) << 6) |
         (byte(pos + 3) & 0x3F);
    if (cp < 0x10000 || cp > 0x10FFFF) return replacement_character;  // overlong, beyond Unicode
  }
  length = n;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

void DecodedText::assign(std::string_view text) {
  // Sized for the worst case (one code point per byte) and trimmed at the end: indexed writes are
  // measurably faster than push_back here, the hot loop of tokenizing English text.
  code_points.resize(text.size());
  props.resize(text.size());
  byte_offsets.resize(text.size() + 1);
  const auto& ascii = ascii_properties();
  size_t n = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto b = static_cast<uint8_t>(text[pos]);
    byte_offsets[n] = static_cast<uint32_t>(pos);
    if (b < 0x80) {
      code_points[n] = b;
      props[n] = ascii[b];
      ++n;
      ++pos;
      continue;
    }
    size_t length = 1;
    const char32_t cp = decode_utf8(text, pos, length);
    code_points[n] = cp;
    props[n] = properties(cp);
    ++n;
    pos += length;
  }
  byte_offsets[n] = static_cast<uint32_t>(pos);
  code_points.resize(n);
  props.resize(n);
  byte_offsets.resize(n + 1);
}

}  // namespace latte::unicode
