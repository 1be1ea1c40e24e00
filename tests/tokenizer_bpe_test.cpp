// latte::Tokenizer on small in-memory vocabularies: merge order, added tokens, BOS/EOS, decoding,
// invalid input. Token texts are written in the byte-level alphabet by an independent helper.
#include <doctest/doctest.h>

#include <latte/error.hpp>
#include <latte/tokenizer.hpp>

#include <cstdint>
#include <string>
#include <vector>

using latte::Token;
using latte::TokenType;

namespace {

// GPT-2's byte alphabet, written from its definition: printable Latin-1 bytes stand for
// themselves; the other 68 bytes map, in byte order, to U+0100, U+0101, ...
std::string byte_char(unsigned b) {
  const bool itself = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  unsigned cp = b;
  if (!itself) {
    unsigned index = 0;
    for (unsigned x = 0; x < b; ++x) {
      if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) ++index;
    }
    cp = 0x100 + index;
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

std::string level(std::string_view bytes) {
  std::string out;
  for (char c : bytes) out += byte_char(static_cast<uint8_t>(c));
  return out;
}

// A vocabulary whose ids 0..255 are the single bytes (id == byte value), then `merged_words`;
// `merges` are "left|right" in plain bytes.
latte::Vocabulary byte_vocabulary(const std::vector<std::string>& merged_words,
                                  const std::vector<std::string>& merges) {
  latte::Vocabulary v;
  v.pre = "gpt-2";
  for (unsigned b = 0; b < 256; ++b) v.tokens.push_back(byte_char(b));
  for (const auto& w : merged_words) v.tokens.push_back(level(w));
  for (const auto& m : merges) {
    const size_t bar = m.find('|');  // "left|right" in plain bytes
    v.merges.push_back(level(m.substr(0, bar)) + " " + level(m.substr(bar + 1)));
  }
  v.token_types.assign(v.tokens.size(), TokenType::normal);
  return v;
}

Token id_of(const latte::Tokenizer& tok, std::string_view bytes) {
  auto id = tok.find_token(level(bytes));
  REQUIRE_MESSAGE(id.has_value(), "no token for " << std::string(bytes));
  return *id;
}

constexpr latte::EncodeOptions plain{.add_special = false, .parse_special = false};

}  // namespace

TEST_CASE("byte-level BPE applies the lowest-ranked merge first, wherever it is") {
  const auto a = latte::Tokenizer::from_vocabulary(byte_vocabulary({"bc", "ab"}, {"b|c", "a|b"}));
  CHECK(a.encode("abc", plain) == std::vector<Token>{'a', id_of(a, "bc")});
  const auto b = latte::Tokenizer::from_vocabulary(byte_vocabulary({"bc", "ab"}, {"a|b", "b|c"}));
  CHECK(b.encode("abc", plain) == std::vector<Token>{id_of(b, "ab"), 'c'});
}

TEST_CASE("byte-level BPE breaks equal ranks leftmost and chains merges") {
  const auto tok = latte::Tokenizer::from_vocabulary(byte_vocabulary({"aa", "aab", "aaaa"}, {"a|a", "aa|b", "aa|aa"}));
  CHECK(tok.encode("aaa", plain) == std::vector<Token>{id_of(tok, "aa"), 'a'});
  // "aa b" cannot apply: after the leftmost "a a" the b follows a lone "a".
  CHECK(tok.encode("aaab", plain) == std::vector<Token>{id_of(tok, "aa"), 'a', 'b'});
  CHECK(tok.encode("aaaa", plain) == std::vector<Token>{id_of(tok, "aaaa")});
  CHECK(tok.encode("aab", plain) == std::vector<Token>{id_of(tok, "aab")});
}

TEST_CASE("merges apply only inside a pre-tokenized piece") {
  const auto tok = latte::Tokenizer::from_vocabulary(byte_vocabulary({"o w", " w"}, {" |w", "o| w"}));
  // gpt-2 splits "o w" into "o" and " w": "o" + " w" would merge inside one piece, never across two.
  CHECK(tok.encode("o w", plain) == std::vector<Token>{'o', id_of(tok, " w")});
}

TEST_CASE("added tokens: user-defined always, control only with parse_special, leftmost then longest") {
  auto v = byte_vocabulary({}, {});
  const auto control = static_cast<Token>(v.tokens.size());
  v.tokens.push_back("<|s|>");
  v.token_types.push_back(TokenType::control);
  const auto control_long = static_cast<Token>(v.tokens.size());
  v.tokens.push_back("<|s|>x");
  v.token_types.push_back(TokenType::control);
  const auto user = static_cast<Token>(v.tokens.size());
  v.tokens.push_back("<u>");
  v.token_types.push_back(TokenType::user_defined);
  const auto tok = latte::Tokenizer::from_vocabulary(v);

  CHECK(tok.encode("a<u>b", plain) == std::vector<Token>{'a', user, 'b'});
  // Without parse_special the control text is ordinary text (gpt-2 pieces: "<|", "s", "|>").
  CHECK(tok.encode("<|s|>", plain) == std::vector<Token>{'<', '|', 's', '|', '>'});
  CHECK(tok.encode("<|s|>", {.add_special = false, .parse_special = true}) == std::vector<Token>{control});
  CHECK(tok.encode("<|s|>x<|s|>", {.add_special = false, .parse_special = true}) ==
        std::vector<Token>{control_long, control});
  CHECK(tok.encode("<<u>", plain) == std::vector<Token>{'<', user});
}

TEST_CASE("add_special adds BOS and EOS only as the vocabulary asks") {
  auto v = byte_vocabulary({}, {});
  v.tokens.push_back("<bos>");
  v.token_types.push_back(TokenType::control);
  v.tokens.push_back("<eos>");
  v.token_types.push_back(TokenType::control);
  v.bos = 256;
  v.eos = 257;
  v.add_bos = true;
  const auto with_bos = latte::Tokenizer::from_vocabulary(v);
  CHECK(with_bos.encode("a") == std::vector<Token>{256, 'a'});
  CHECK(with_bos.encode("a", plain) == std::vector<Token>{'a'});
  v.add_eos = true;
  v.add_bos = false;
  CHECK(latte::Tokenizer::from_vocabulary(v).encode("a") == std::vector<Token>{'a', 257});
}

TEST_CASE("decode renders or skips control tokens and rejects ids outside the vocabulary") {
  auto v = byte_vocabulary({"hi"}, {"h|i"});
  v.tokens.push_back("<ctl>");
  v.token_types.push_back(TokenType::control);
  v.tokens.push_back("[PAD258]");
  v.token_types.push_back(TokenType::unused);
  const auto tok = latte::Tokenizer::from_vocabulary(v);
  const std::vector<Token> ids{257, 256, ' ', 258};
  CHECK(tok.decode(ids) == "<ctl>hi ");
  CHECK(tok.decode(ids, {.render_special = false}) == "hi ");
  for (Token bad : {-1, 259, 1 << 30}) {
    const std::vector<Token> one{bad};
    try {
      (void)tok.decode(one);
      FAIL("accepted " << bad);
    } catch (const latte::Error& e) {
      CHECK(e.code() == latte::ErrorCode::invalid_argument);
      CHECK(std::string(e.what()).find(std::to_string(bad)) != std::string::npos);
      CHECK(std::string(e.what()).find("259") != std::string::npos);
    }
  }
}

TEST_CASE("invalid UTF-8 is split as U+FFFD but encoded as its raw bytes") {
  const auto tok = latte::Tokenizer::from_vocabulary(byte_vocabulary({}, {}));
  const std::string text =
      "\xFF\xFE"
      "ab \xC3 \xE2\x82 \xED\xA0\x80 \xF4\x90\x80\x80 ok";
  const auto ids = tok.encode(text, plain);
  std::vector<Token> bytes(text.begin(), text.end());
  for (auto& b : bytes) b = static_cast<uint8_t>(b);
  CHECK(ids == bytes);  // no merges: one token per byte, nothing lost or replaced
  CHECK(tok.decode(ids) == text);
}

TEST_CASE("bytes without a byte-level token fall back to <0xXX>, then to the unknown token, else an Error") {
  auto v = byte_vocabulary({}, {});
  v.tokens['z'] = "[unused z]";
  v.token_types['z'] = TokenType::unused;
  v.tokens.push_back("<0x7A>");
  v.token_types.push_back(TokenType::byte);
  auto tok = latte::Tokenizer::from_vocabulary(v);
  CHECK(tok.encode("az", plain) == std::vector<Token>{'a', 256});
  CHECK(tok.decode(std::vector<Token>{256}) == "z");

  v.tokens.back() = "<unk>";
  v.token_types.back() = TokenType::unknown;
  v.unk = 256;
  CHECK(latte::Tokenizer::from_vocabulary(v).encode("z", plain) == std::vector<Token>{256});

  v.unk.reset();
  CHECK_THROWS_AS((void)latte::Tokenizer::from_vocabulary(v).encode("z", plain), latte::Error);
}

TEST_CASE("inconsistent vocabularies are rejected with an Error naming the key") {
  const auto expect = [](latte::Vocabulary v, latte::ErrorCode code, const std::string& needle) {
    try {
      (void)latte::Tokenizer::from_vocabulary(std::move(v));
      FAIL("accepted");
    } catch (const latte::Error& e) {
      CHECK(e.code() == code);
      CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
    }
  };
  auto v = byte_vocabulary({}, {});
  {
    auto w = v;
    w.model = "llama";
    expect(w, latte::ErrorCode::unsupported, "'llama'");
  }
  {
    auto w = v;
    w.pre = "qwen2";
    expect(w, latte::ErrorCode::unsupported, "'qwen2'");
  }
  {
    auto w = v;
    w.token_types.pop_back();
    expect(w, latte::ErrorCode::invalid_file, "token_type");
  }
  {
    auto w = v;
    w.bos = 256;
    expect(w, latte::ErrorCode::invalid_file, "bos_token_id = 256");
  }
  {
    auto w = v;
    w.merges.push_back("nospace");
    expect(w, latte::ErrorCode::invalid_file, "merges[0]");
  }
  {
    auto w = v;
    w.add_eos = true;
    expect(w, latte::ErrorCode::invalid_file, "add_eos_token");
  }
  {
    auto w = v;
    w.tokens.clear();
    w.token_types.clear();
    expect(w, latte::ErrorCode::invalid_file, "empty");
  }
}
