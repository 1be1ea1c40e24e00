// Unicode tables and the UTF-8 decoder. Expected categories are taken from the Unicode standard's
// character charts, not from the generated tables.
#include <doctest/doctest.h>

#include <cstdint>
#include "tokenizer/unicode.hpp"

using latte::unicode::Category;

TEST_CASE("general categories of characters from many scripts") {
  using latte::unicode::category;
  CHECK(category(U'A') == Category::Lu);
  CHECK(category(U'z') == Category::Ll);
  CHECK(category(0x01C5) == Category::Lt);  // ǅ
  CHECK(category(0x02B0) == Category::Lm);  // ʰ
  CHECK(category(0x4E2D) == Category::Lo);  // 中
  CHECK(category(0x0301) == Category::Mn);  // combining acute
  CHECK(category(0x0903) == Category::Mc);  // Devanagari visarga
  CHECK(category(0x0663) == Category::Nd);  // Arabic-Indic three
  CHECK(category(0x216B) == Category::Nl);  // Roman numeral twelve
  CHECK(category(0x00BD) == Category::No);  // ½
  CHECK(category(U'_') == Category::Pc);
  CHECK(category(0x2014) == Category::Pd);  // em dash
  CHECK(category(0x3002) == Category::Po);  // ideographic full stop
  CHECK(category(0x20AC) == Category::Sc);  // €
  CHECK(category(U'+') == Category::Sm);
  CHECK(category(0x1F600) == Category::So);  // 😀
  CHECK(category(0x3000) == Category::Zs);
  CHECK(category(0x200D) == Category::Cf);  // zero width joiner
  CHECK(category(0xE000) == Category::Co);
  CHECK(category(0xD800) == Category::Cs);
  CHECK(category(0x0378) == Category::Cn);  // unassigned
  CHECK(category(0x110000) == Category::Cn);
}

TEST_CASE("White_Space follows PropList.txt, not a guess") {
  using latte::unicode::is_white_space;
  for (char32_t c : {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x200A, 0x2028, 0x2029, 0x202F,
                     0x205F, 0x3000}) {
    CAPTURE(static_cast<uint32_t>(c));
    CHECK(is_white_space(c));
  }
  for (char32_t c : {0x08, 0x1C, 0x200B, 0x180E, 0xFEFF, 0x61, 0x2060}) {
    CAPTURE(static_cast<uint32_t>(c));
    CHECK_FALSE(is_white_space(c));
  }
}

TEST_CASE("UTF-8 decoding consumes every byte; invalid sequences become U+FFFD one byte at a time") {
  latte::unicode::DecodedText t;
  t.assign("a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80");
  CHECK(t.code_points == std::vector<char32_t>{U'a', 0xE9, 0x4E2D, 0x1F600});
  CHECK(t.byte_offsets == std::vector<uint32_t>{0, 1, 3, 6, 10});
  // stray continuation, overlong, surrogate, beyond U+10FFFF, truncated
  t.assign("\x80\xC0\xAF\xED\xA0\x80\xF4\x90\x80\x80\xE4\xB8");
  CHECK(t.size() == 12);
  for (char32_t c : t.code_points) CHECK(c == latte::unicode::replacement_character);
}
