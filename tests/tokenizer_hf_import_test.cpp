// The Hugging Face tokenizer.json importer: what it writes for each kind of entry (as llama.cpp's
// converter does), that the result loads back through GGUF, and that bad input names its JSON path.
#include <doctest/doctest.h>

#include <latte/error.hpp>
#include <latte/gguf.hpp>
#include <latte/tokenizer.hpp>

#include "convert/hf_tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>

#include <string>

using nlohmann::json;

namespace {

// GPT-2 byte alphabet character of byte b (from its definition).
std::string byte_char(unsigned b) {
  const auto itself = [](unsigned x) { return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE; };
  unsigned cp = b;
  if (!itself(b)) {
    unsigned index = 0;
    for (unsigned x = 0; x < b; ++x) index += itself(x) ? 0 : 1;
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

const char* const v3_main =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

// A DeepSeek-V3-style tokenizer.json: BOS at id 0, the 256 bytes at 1..256, two merged tokens,
// a hole at 259 and three non-special added tokens.
json small_tokenizer() {
  json vocab = json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[byte_char(b)] = b + 1;
  vocab
      ["<\xEF\xBD\x9C"
       "bos\xEF\xBD\x9C>"] = 0;
  vocab[byte_char(' ') + "t"] = 257;
  vocab["he"] = 258;
  const auto split = [](const char* regex) {
    return json{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
  };
  json t;
  t["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array()}};
  t["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {split("\\p{N}{1,3}"),
                          split("[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+"),
                          split(v3_main),
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  t["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", {json::array({byte_char(' '), "t"}), "h e"}}};
  t["added_tokens"] = {
      {{"id", 0},
       {"content",
        "<\xEF\xBD\x9C"
        "bos\xEF\xBD\x9C>"},
       {"special", true}},
      {{"id", 260}, {"content", "<think>"}, {"special", false}},
      {{"id", 261}, {"content", "<|tool|>"}, {"special", false}},
      {{"id", 262},
       {"content",
        "a\xE2\x96\x81"
        "b"},
       {"special", false}},
  };
  return t;
}

json small_config() {
  return {{"add_bos_token", true},
          {"bos_token",
           {{"__type", "AddedToken"},
            {"content",
             "<\xEF\xBD\x9C"
             "bos\xEF\xBD\x9C>"}}},
          {"eos_token", "<|tool|>"},
          {"chat_template", "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"}};
}

void expect_error(const json& tokenizer, const json& config, latte::ErrorCode code, const std::string& needle,
                  latte::convert::HfTokenizerOptions options = {}) {
  try {
    (void)latte::convert::import_hf_tokenizer(tokenizer.dump(), config.is_null() ? "" : config.dump(), options);
    FAIL("accepted");
  } catch (const latte::Error& e) {
    CHECK(e.code() == code);
    CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
  }
}

}  // namespace

TEST_CASE("importer writes tokens by id with llama.cpp's token types and padding") {
  const auto meta =
      latte::convert::import_hf_tokenizer(small_tokenizer().dump(), small_config().dump(), {.vocab_size = 264});
  const auto& v = meta.vocabulary;
  CHECK(v.model == "gpt2");
  CHECK(v.pre == "deepseek-v3");
  REQUIRE(v.tokens.size() == 264);
  CHECK(v.tokens[0] ==
        "<\xEF\xBD\x9C"
        "bos\xEF\xBD\x9C>");
  CHECK(v.token_types[0] == latte::TokenType::control);  // special
  CHECK(v.tokens[1 + 'a'] == "a");
  CHECK(v.token_types[1 + 'a'] == latte::TokenType::normal);
  CHECK(v.tokens[259] == "[PAD259]");  // hole
  CHECK(v.token_types[259] == latte::TokenType::unused);
  CHECK(v.token_types[260] == latte::TokenType::user_defined);  // "<think>"
  CHECK(v.token_types[261] == latte::TokenType::control);       // not special, but spelled like a marker
  CHECK(v.tokens[262] == "a b");                                // SentencePiece space pre-normalised
  CHECK(v.token_types[262] == latte::TokenType::user_defined);
  CHECK(v.tokens[263] == "[PAD263]");  // up to the model's vocab_size
  CHECK(v.merges == std::vector<std::string>{byte_char(' ') + " t", "h e"});
  CHECK(v.bos == 0);
  CHECK(v.eos == 261);
  CHECK(v.add_bos);
  CHECK(meta.has_add_bos);
  CHECK_FALSE(meta.has_add_eos);
  CHECK(v.chat_template.find("bos_token") != std::string::npos);
}

TEST_CASE("imported metadata round-trips through a GGUF file into a working tokenizer") {
  const auto meta = latte::convert::import_hf_tokenizer(small_tokenizer().dump(), small_config().dump());
  latte::gguf::Writer writer;
  meta.write_to(writer);
  const auto bytes = writer.write_to_memory([](size_t, std::span<std::byte>) {});
  const auto file = latte::gguf::File::from_bytes(bytes, "imported.gguf");
  std::vector<std::string> keys;
  for (const auto& kv : file.metadata()) keys.push_back(kv.key);
  CHECK(keys == std::vector<std::string>{"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
                                         "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
                                         "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                         "tokenizer.ggml.add_bos_token", "tokenizer.chat_template"});
  const auto tok = latte::Tokenizer::from_gguf(file);
  CHECK(tok.n_vocab() == 263);
  CHECK(tok.encode(" the") == std::vector<latte::Token>{0, 257, 258});
  CHECK(tok.encode("x<think>y", {.add_special = false}) == std::vector<latte::Token>{1 + 'x', 260, 1 + 'y'});
  CHECK(tok.decode(std::vector<latte::Token>{0, 257, 258}) ==
        "<\xEF\xBD\x9C"
        "bos\xEF\xBD\x9C> the");
}

TEST_CASE("importer recognises GPT-2's ByteLevel-only pre-tokenizer") {
  auto t = small_tokenizer();
  t["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  CHECK(latte::convert::import_hf_tokenizer(t.dump(), "").vocabulary.pre == "gpt-2");
}

TEST_CASE("importer errors name the file and the JSON path at fault") {
  using latte::ErrorCode;
  expect_error(json("not an object"), json(), ErrorCode::invalid_file, "tokenizer.json");
  {
    auto t = small_tokenizer();
    t["model"]["merges"][1] = 5;
    expect_error(t, json(), ErrorCode::invalid_file, "/model/merges/1");
  }
  {
    auto t = small_tokenizer();
    t["model"]["type"] = "WordPiece";
    expect_error(t, json(), ErrorCode::unsupported, "WordPiece");
  }
  {
    auto t = small_tokenizer();
    t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{N}+";
    expect_error(t, json(), ErrorCode::unsupported, "\\p{N}+");
  }
  {
    auto t = small_tokenizer();
    t["normalizer"] = {{"type", "Lowercase"}};
    expect_error(t, json(), ErrorCode::unsupported, "Lowercase");
  }
  {
    auto c = small_config();
    c["bos_token"] = "<nope>";
    expect_error(small_tokenizer(), c, ErrorCode::invalid_file, "/bos_token");
  }
  {
    auto t = small_tokenizer();
    t["added_tokens"][1]["id"] = 257;  // already "Ġt" in the vocabulary
    expect_error(t, json(), ErrorCode::invalid_file, "/added_tokens/1");
  }
  expect_error(small_tokenizer(), json(), ErrorCode::invalid_file, "vocab_size", {.vocab_size = 100});
  {
    auto t = small_tokenizer();
    t["model"]["vocab"]["he"] = "258";
    expect_error(t, json(), ErrorCode::invalid_file, "/model/vocab/he");
  }
  try {
    (void)latte::convert::import_hf_tokenizer("{\"model\": [1,", "");
    FAIL("accepted");
  } catch (const latte::Error& e) {
    CHECK(e.code() == ErrorCode::invalid_file);
    CHECK(std::string(e.what()).find("not valid JSON") != std::string::npos);
  }
}

TEST_CASE("importer reads tokenizer.json files written by the Hugging Face tokenizers library") {
  // The oracle models' tokenizers (merges stored as pairs, DeepSeek-V3 split patterns).
  const std::string dir = std::string(LATTE_TESTDATA_DIR) + "/oracle/deepseek-v3";
  if (!std::filesystem::exists(dir + "/tokenizer.json")) return;
  const auto meta =
      latte::convert::import_hf_tokenizer_files(dir + "/tokenizer.json", dir + "/tokenizer_config.json", 384);
  CHECK(meta.vocabulary.pre == "deepseek-v3");
  CHECK(meta.vocabulary.tokens.size() == 384);
  CHECK(meta.vocabulary.bos == 0);
  CHECK(meta.vocabulary.eos == 1);
  const auto tok = latte::Tokenizer::from_vocabulary(meta.vocabulary);
  const std::string text = "The jury said it did find that many of Georgia's 1,234 laws are outmoded.\n\n\xE4\xBD\xA0";
  const auto ids = tok.encode(text);
  CHECK(ids.front() == 0);
  CHECK(tok.decode(ids, {.render_special = false}) == text);
}
