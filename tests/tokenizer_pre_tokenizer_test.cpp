// The regex engine and the pre-tokenizer cascades. Expected splits are derived by hand from the
// patterns (leftmost match, ordered alternation, greedy quantifiers with backtracking).
#include <doctest/doctest.h>

#include <latte/error.hpp>

#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/regex.hpp"

#include <random>
#include <string>
#include <vector>

using latte::tokenizer::PreTokenizer;
using latte::tokenizer::Regex;
using Pieces = std::vector<std::string>;

namespace {

// All pieces of `text` under the single regex `pattern` (matches and gaps).
Pieces split_with(std::string_view pattern, std::string_view text) {
  const std::string_view patterns[] = {pattern};
  return PreTokenizer::from_patterns("test", patterns).split(text);
}

}  // namespace

TEST_CASE("regex alternation is ordered, not longest") {
  CHECK(split_with("a|ab", "ab") == Pieces{"a", "b"});
  CHECK(split_with("ab|a", "ab") == Pieces{"ab"});
}

TEST_CASE("regex greedy repetition backtracks to let the rest match") {
  CHECK(split_with("a+ab", "aaab") == Pieces{"aaab"});
  CHECK(split_with("\\s*[\\r\\n]+", "  \n\n  x") == Pieces{"  \n\n", "  x"});
  CHECK(split_with("\\p{N}{1,3}", "1234567") == Pieces{"123", "456", "7"});
  CHECK(split_with("x{2}", "xxxxx") == Pieces{"xx", "xx", "x"});
  CHECK(split_with("(?:ab){2,}", "abababa") == Pieces{"ababab", "a"});
}

TEST_CASE("regex negative look-ahead keeps the last space for the next word") {
  CHECK(split_with("\\s+(?!\\S)|\\s+", "a   b") == Pieces{"a", "  ", " ", "b"});
  CHECK(split_with("\\s+(?!\\S)", "a   ") == Pieces{"a", "   "});
  CHECK(split_with("a(?=b)", "acab") == Pieces{"ac", "a", "b"});
}

TEST_CASE("regex classes use Unicode categories, negation and escapes") {
  CHECK(split_with("\\p{L}+", "h\xC3\xA9llo w\xC3\xB6rld") == Pieces{"h\xC3\xA9llo", " ", "w\xC3\xB6rld"});
  CHECK(split_with("[^\\s\\p{L}]+", "ab!?  c#") == Pieces{"ab", "!?", "  c", "#"});
  CHECK(split_with("[\\p{L}\\p{M}]+", "e\xCC\x81x 1") == Pieces{"e\xCC\x81x", " 1"});  // U+0301 is Mn
  CHECK(split_with("\\p{N}+", "\xD9\xA3\xD9\xA4 x \xE2\x85\xAB") == Pieces{"\xD9\xA3\xD9\xA4", " x ", "\xE2\x85\xAB"});
  CHECK(split_with("[\\x{4E00}-\\x{9FA5}]+", "ab\xE4\xBD\xA0\xE5\xA5\xBD") == Pieces{"ab", "\xE4\xBD\xA0\xE5\xA5\xBD"});
  CHECK(split_with("[\\-\\]\\\\]+", "a-]\\b") == Pieces{"a", "-]\\", "b"});
  CHECK(split_with("\\s",
                   "a\xC2\xA0"
                   "b") == Pieces{"a", "\xC2\xA0", "b"});  // U+00A0 is White_Space
}

TEST_CASE("regex (?i:) folds ASCII case") {
  CHECK(split_with("(?i:'s|'ll)", "IT'S we'LL") == Pieces{"IT", "'S", " we", "'LL"});
}

TEST_CASE("regex $ matches only at the end of the piece") {
  CHECK(split_with("\\s+$", "a  b  ") == Pieces{"a  b", "  "});
}

TEST_CASE("regex rejects unsupported or malformed syntax with an Error naming the pattern") {
  for (const char* bad :
       {"a+?", "a++", "(?<=a)b", "\\bword", "[[:alpha:]]", "\\p{Greek}", "(a", "a)", "[a-", "b{3,1}"}) {
    CAPTURE(bad);
    try {
      (void)Regex::compile(bad);
      FAIL("compiled");
    } catch (const latte::Error& e) {
      CHECK(std::string(e.what()).find(bad) != std::string::npos);
    }
  }
}

TEST_CASE("deepseek-v3 pre-tokenizer splits digits by three, CJK and kana runs, then words") {
  const auto pre = PreTokenizer::for_name("deepseek-v3");
  CHECK(pre.split("Hello world 12345 \xE4\xBD\xA0\xE5\xA5\xBD") ==
        Pieces{"Hello", " world", " ", "123", "45", " ", "\xE4\xBD\xA0\xE5\xA5\xBD"});
  CHECK(pre.split("x=1;") == Pieces{"x", "=", "1", ";"});
  CHECK(pre.split(".Net rocks") == Pieces{".Net", " rocks"});
  CHECK(pre.split("a\n\n  b") == Pieces{"a", "\n\n", " ", " b"});
  CHECK(pre.split("ab\xCC\x81"
                  "c d") == Pieces{"ab\xCC\x81"
                                   "c",
                                   " d"});
  // 日本語テキストと (kanji, katakana, hiragana: one run) then 한국어 (Hangul: letters)
  CHECK(pre.split("\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88\xE3\x81\xA8"
                  "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4") ==
        Pieces{"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88\xE3\x81\xA8",
               "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4"});
  CHECK(pre.split("end.\n\nNext") == Pieces{"end", ".\n\n", "Next"});
}

TEST_CASE("deepseek-llm pre-tokenizer isolates newlines, cased letters, punctuation and digit runs") {
  const auto pre = PreTokenizer::for_name("deepseek-llm");
  CHECK(pre.split("Hello World! 123\n") == Pieces{"Hello", " World", "!", " ", "123", "\n"});
  CHECK(pre.split("  Hi") == Pieces{" ", " Hi"});
  CHECK(pre.split("a  ") == Pieces{"a", "  "});
}

TEST_CASE("deepseek-coder pre-tokenizer splits single digits") {
  const auto pre = PreTokenizer::for_name("deepseek-coder");
  CHECK(pre.split("foo(bar) 42") == Pieces{"foo", "(", "bar", ")", " ", "4", "2"});
}

TEST_CASE("gpt-2 pre-tokenizer (also named gpt2 and default)") {
  for (const char* name : {"gpt-2", "gpt2", "default"}) {
    const auto pre = PreTokenizer::for_name(name);
    CHECK(pre.name() == "gpt-2");
    CHECK(pre.split("Hello, world's 123  end  ") == Pieces{"Hello", ",", " world", "'s", " 123", " ", " end", "  "});
  }
}

TEST_CASE("glm4 pre-tokenizer: case-insensitive contractions, digit groups of three") {
  const auto pre = PreTokenizer::for_name("glm4");
  CHECK(pre.split("I'M here 12345\n\nok") == Pieces{"I", "'M", " here", " ", "123", "45", "\n\n", "ok"});
}

TEST_CASE("unknown pre-tokenizer names are an unsupported Error naming them") {
  try {
    (void)PreTokenizer::for_name("llama-bpe");
    FAIL("accepted");
  } catch (const latte::Error& e) {
    CHECK(e.code() == latte::ErrorCode::unsupported);
    CHECK(std::string(e.what()).find("llama-bpe") != std::string::npos);
  }
}

TEST_CASE("pre-tokenizer detection accepts escaped and literal spellings of a cascade") {
  using latte::tokenizer::detect_pre_tokenizer;
  const std::vector<std::string> v3 = {
      "\\p{N}{1,3}", "[\xE4\xB8\x80-\xE9\xBE\xA5\\u3040-\\u309F\\x{30A0}-\\x{30FF}]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
      "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"};
  CHECK(detect_pre_tokenizer(v3) == "deepseek-v3");
  const std::vector<std::string> llama3 = {
      "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
  CHECK(detect_pre_tokenizer(llama3) == "glm4");
  const std::vector<std::string> other = {"\\p{N}", "\\s+"};
  CHECK_FALSE(detect_pre_tokenizer(other).has_value());
}

TEST_CASE("every cascade splits text between an ASCII letter or digit and a newline as at the end of text") {
  // The tokenizer pre-tokenizes long texts in chunks cut at such positions; this pins the property.
  std::mt19937 rng(std::random_device{}());
  const std::vector<std::string> atoms = {
      "a",        "Z",        "1",  "23", " ", "  ",       "\t",           "\n",
      "\r\n",     ".",        "!?", "'s", "(", "\xC3\xA9", "\xE4\xBD\xA0", "\xF0\x9F\x98\x80",
      "\xCC\x81", "\xC2\xA0", "_",  "$"};
  const auto random_text = [&](size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += atoms[rng() % atoms.size()];
    return s;
  };
  for (const auto& spec : latte::tokenizer::known_pre_tokenizers()) {
    const auto pre = PreTokenizer::for_name(spec.name);
    for (int trial = 0; trial < 200; ++trial) {
      static const std::string alphanumeric = "abcxyzABCXYZ0123456789";
      std::string a = random_text(rng() % 12);
      a.push_back(alphanumeric[rng() % alphanumeric.size()]);
      std::string b(1, '\n');
      b.append(random_text(rng() % 12));
      auto expected = pre.split(a);
      const auto tail = pre.split(b);
      expected.insert(expected.end(), tail.begin(), tail.end());
      std::string joined = a;
      joined.append(b);
      CAPTURE(spec.name);
      CAPTURE(joined);
      CHECK(pre.split(joined) == expected);
    }
  }
}
