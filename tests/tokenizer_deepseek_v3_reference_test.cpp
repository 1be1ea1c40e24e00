// Acceptance: DeepSeek-V3's real tokenizer. tests/data/deepseek-v3-vocab.gguf was written by latte's
// importer from DeepSeek-V3's tokenizer.json; the expected ids were computed by an independent
// tokenizer (transformers.js port, tools/tokenizer_ref/gen_reference.mjs) from the same tokenizer.json.
#include <doctest/doctest.h>

#include "support/test_options.hpp"

#include <latte/gguf.hpp>
#include <latte/tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace {

std::string ids_text(const std::vector<latte::Token>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  return out;
}

std::vector<latte::Token> ids_of(const nlohmann::json& list) {
  std::vector<latte::Token> ids;
  for (const auto& id : list) ids.push_back(id.get<latte::Token>());
  return ids;
}

std::string escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("deepseek-v3 tokenizer matches the reference implementation on every reference string") {
  const std::string vocab_path = latte::test::data_path("deepseek-v3-vocab.gguf");
  if (!std::filesystem::exists(vocab_path)) {
    MESSAGE("skipped: " << vocab_path << " is absent (see tests/data/README.md to recreate it)");
    return;
  }
  const auto tok = latte::Tokenizer::from_gguf(latte::gguf::File::open(vocab_path));
  CHECK(tok.pre_tokenizer() == "deepseek-v3");
  CHECK(tok.n_vocab() == 128815);
  CHECK(tok.bos() == 0);
  CHECK(tok.eos() == 1);
  CHECK(tok.add_bos());

  std::ifstream in(latte::test::data_path("deepseek-v3-tokenizer-reference.json"));
  REQUIRE(in.good());
  const auto reference = nlohmann::json::parse(in);
  const auto& cases = reference.at("cases");
  REQUIRE(cases.size() >= 200);

  size_t passed = 0;
  bool reported = false;
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const bool parse_special = c.at("parse_special").get<bool>();
    const auto expected = ids_of(c.at("ids"));
    const auto got = tok.encode(text, {.add_special = false, .parse_special = parse_special});
    if (got == expected) {
      ++passed;
      continue;
    }
    if (!reported) {  // the first difference in full; the count below says how many more
      reported = true;
      FAIL_CHECK("first differing case: '" << escaped(text) << "' parse_special=" << parse_special << "\n  expected: "
                                           << ids_text(expected) << "\n  got:      " << ids_text(got));
    }
  }
  MESSAGE("deepseek-v3 reference cases passed: " << passed << " / " << cases.size());
  CHECK(passed == cases.size());

  // With add_special the vocabulary's add_bos_token puts <｜begin▁of▁sentence｜> (id 0) first.
  const auto& first = cases.at(0);
  auto with_bos = ids_of(first.at("ids"));
  with_bos.insert(with_bos.begin(), 0);
  CHECK(tok.encode(first.at("text").get<std::string>(), {.add_special = true}) == with_bos);
}
