// Properties of the real DeepSeek-V3 vocabulary on fresh random text: decode(encode(s)) == s,
// chunked encoding of long text equals encoding its paragraphs one by one, the streaming decoder
// never splits a character and adds up to decode(), and concurrent encodes agree.
#include <doctest/doctest.h>

#include "support/test_options.hpp"

#include <latte/gguf.hpp>
#include <latte/tokenizer.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

const latte::Tokenizer* deepseek_v3() {
  static const std::optional<latte::Tokenizer> tok = []() -> std::optional<latte::Tokenizer> {
    const std::string path = latte::test::data_path("deepseek-v3-vocab.gguf");
    if (!std::filesystem::exists(path)) return std::nullopt;
    return latte::Tokenizer::from_gguf(latte::gguf::File::open(path));
  }();
  return tok ? &*tok : nullptr;
}

// Code points from many scripts and classes, written as UTF-8.
const std::vector<std::string>& atoms() {
  static const std::vector<std::string> list = {"a",
                                                "b",
                                                "Z",
                                                "q",
                                                "the",
                                                " ",
                                                "  ",
                                                "\t",
                                                "\n",
                                                "\r\n",
                                                "0",
                                                "7",
                                                "42",
                                                ".",
                                                ",",
                                                "!",
                                                "'",
                                                "\"",
                                                "(",
                                                "{",
                                                "<",
                                                "|",
                                                "_",
                                                "-",
                                                "$",
                                                "\xC3\xA9",
                                                "\xC3\x9F",
                                                "\xCC\x81",
                                                "\xC2\xA0",
                                                "\xD0\x96",
                                                "\xD7\xA9",
                                                "\xD8\xB9",
                                                "\xE0\xA4\xB9",
                                                "\xE0\xB8\x81",
                                                "\xE3\x81\x82",
                                                "\xE3\x82\xA2",
                                                "\xE4\xB8\xAD",
                                                "\xE6\x96\x87",
                                                "\xEA\xB0\x80",
                                                "\xE2\x82\xAC",
                                                "\xE2\x80\x94",
                                                "\xEF\xBC\x81",
                                                "\xF0\x9F\x98\x80",
                                                "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
                                                "\xE2\x80\x8D",
                                                "\xEF\xB8\x8F",
                                                "\xF0\x9F\xA6\x99",
                                                "\xF0\x90\x90\x80",
                                                "<\xEF\xBD\x9CUser\xEF\xBD\x9C>",
                                                "<\xEF\xBD\x9C"
                                                "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"};
  return list;
}

std::string random_text(std::mt19937& rng, size_t atoms_count) {
  std::string s;
  for (size_t i = 0; i < atoms_count; ++i) s += atoms()[rng() % atoms().size()];
  return s;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<uint8_t>(s[i]);
    size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

}  // namespace

TEST_CASE("deepseek-v3: decode(encode(s)) == s for random valid UTF-8, special parsing on or off") {
  const auto* tok = deepseek_v3();
  if (!tok) return;
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 300; ++trial) {
    const std::string s = random_text(rng, rng() % 40);
    const bool parse_special = trial % 2;
    const auto ids = tok->encode(s, {.add_special = false, .parse_special = parse_special});
    CAPTURE(s);
    CHECK(tok->decode(ids) == s);
  }
}

TEST_CASE("deepseek-v3: encoding a long text in chunks equals encoding its paragraphs separately") {
  const auto* tok = deepseek_v3();
  if (!tok) return;
  std::mt19937 rng(std::random_device{}());
  // Paragraphs end in an ASCII letter and are joined by newlines: each join is a possible cut.
  std::vector<std::string> paragraphs;
  std::string whole;
  while (whole.size() < 200 * 1024) {
    std::string p = random_text(rng, 5 + rng() % 60) + "x";
    if (!paragraphs.empty()) p = std::string(1 + rng() % 2, '\n') + p;
    whole += p;
    paragraphs.push_back(std::move(p));
  }
  std::vector<latte::Token> expected;
  for (const auto& p : paragraphs) {
    const auto ids = tok->encode(p, {.add_special = false});
    expected.insert(expected.end(), ids.begin(), ids.end());
  }
  CHECK(tok->encode(whole, {.add_special = false}) == expected);
}

TEST_CASE("streaming decoder holds back split characters and adds up to decode()") {
  const auto* tok = deepseek_v3();
  if (!tok) return;
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 100; ++trial) {
    const std::string s = random_text(rng, 1 + rng() % 20);
    // Spell s with single-byte tokens at random places, so multi-byte characters are split.
    std::vector<latte::Token> ids;
    for (size_t i = 0; i < s.size();) {
      if (rng() % 2) {
        const auto byte_token = tok->encode(s.substr(i, 1), {.add_special = false});
        ids.insert(ids.end(), byte_token.begin(), byte_token.end());
        ++i;
      } else {
        const size_t n = 1 + rng() % 6;
        const auto piece = tok->encode(s.substr(i, n), {.add_special = false});
        ids.insert(ids.end(), piece.begin(), piece.end());
        i += n;
      }
    }
    CAPTURE(s);
    REQUIRE(tok->decode(ids) == s);
    latte::StreamDecoder stream(*tok);
    std::string streamed;
    for (latte::Token id : ids) {
      const std::string out = stream.push(id);
      CHECK(valid_utf8(out));
      CHECK(stream.pending_bytes() <= 3);
      streamed += out;
    }
    CHECK(stream.pending_bytes() == 0);  // s is valid UTF-8: nothing is left incomplete
    streamed += stream.flush();
    CHECK(streamed == s);
  }
}

TEST_CASE("streaming decoder flushes an incomplete sequence as its raw bytes") {
  const auto* tok = deepseek_v3();
  if (!tok) return;
  const auto lead = tok->encode("\xE4", {.add_special = false});  // first byte of a 3-byte character
  REQUIRE(lead.size() == 1);
  latte::StreamDecoder stream(*tok);
  CHECK(stream.push(lead[0]).empty());
  CHECK(stream.pending_bytes() == 1);
  CHECK(stream.flush() == "\xE4");
  CHECK(stream.push(tok->encode("a", {.add_special = false})[0]) == "a");
}

TEST_CASE("concurrent encodes of one tokenizer give identical results") {
  const auto* tok = deepseek_v3();
  if (!tok) return;
  std::mt19937 rng(std::random_device{}());
  const std::string text = random_text(rng, 3000);
  const auto expected = tok->encode(text);
  std::vector<std::vector<latte::Token>> results(4);
  std::vector<std::thread> threads;
  for (auto& r : results) threads.emplace_back([&] { r = tok->encode(text); });
  for (auto& t : threads) t.join();
  for (const auto& r : results) CHECK(r == expected);
}
