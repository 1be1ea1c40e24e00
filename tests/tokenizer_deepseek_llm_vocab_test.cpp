// Acceptance: the DeepSeek LLM vocabulary (written by llama.cpp's converter) tokenizes llama.cpp's
// published test inputs into exactly the ids of its .out file (produced by the Hugging Face
// tokenizer). add_special and parse_special are off, as in llama.cpp's test-tokenizer-0.
#include <doctest/doctest.h>

#include "support/temp_dir.hpp"
#include "support/test_options.hpp"

#include <latte/gguf.hpp>
#include <latte/tokenizer.hpp>

#include <string>
#include <vector>

namespace {

std::vector<std::string> split_on(const std::string& text, const std::string& separator) {
  std::vector<std::string> parts;
  size_t at = 0;
  while (true) {
    const size_t next = text.find(separator, at);
    if (next == std::string::npos) {
      parts.push_back(text.substr(at));
      return parts;
    }
    parts.push_back(text.substr(at, next - at));
    at = next + separator.size();
  }
}

std::string join_ids(const std::vector<latte::Token>& ids) {
  std::string out;
  for (auto id : ids) {
    out += ' ';
    out += std::to_string(id);
  }
  return out;
}

}  // namespace

TEST_CASE("deepseek-llm vocabulary reproduces llama.cpp's 46 reference tokenizations exactly") {
  const auto file = latte::gguf::File::open(latte::test::data_path("ggml-vocab-deepseek-llm.gguf"));
  const auto tok = latte::Tokenizer::from_gguf(file);
  CHECK(tok.pre_tokenizer() == "deepseek-llm");
  CHECK(tok.n_vocab() == 102400);

  auto inputs = split_on(latte::test::read_text_file(latte::test::data_path("ggml-vocab-deepseek-llm.gguf.inp")),
                         "\n__ggml_vocab_test__\n");
  auto outputs =
      split_on(latte::test::read_text_file(latte::test::data_path("ggml-vocab-deepseek-llm.gguf.out")), "\n");
  REQUIRE(inputs.size() == 47);  // 46 cases and the empty remainder after the last marker
  REQUIRE(outputs.size() == 47);
  inputs.pop_back();
  outputs.pop_back();

  int passed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto ids = tok.encode(inputs[i], {.add_special = false, .parse_special = false});
    if (join_ids(ids) == outputs[i]) {
      ++passed;
    } else {
      FAIL_CHECK("case " << i << " input '" << inputs[i] << "'\n  expected:" << outputs[i]
                         << "\n  got:     " << join_ids(ids));
    }
  }
  MESSAGE("deepseek-llm reference cases passed: " << passed << " / " << inputs.size());
  CHECK(passed == 46);
}
