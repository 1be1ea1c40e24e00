// Test helper: writes a small random-weight model that latte-chat can talk to: latte-tiny's shape
// (fewer blocks), a byte-level BPE vocabulary of printable ASCII plus merges for common English
// words, <s> / </s> control tokens, and latte's plain chat template. The output rows of the control
// tokens are zeroed, so greedy replies never end at once and every reply prints readable text.
//   latte_write_chat_test_model OUT.gguf [MAIN_LAYERS]
#include "convert/hf_tokenizer.hpp"
#include "model/presets.hpp"
#include "model/random_model.hpp"
#include "tokenizer/byte_level.hpp"

#include <latte/chat.hpp>
#include <latte/error.hpp>
#include <latte/tokenizer.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

namespace {

constexpr const char* kWords[] = {
    "the",   "and",   "of",    "to",    "in",   "is",    "it",   "you",   "that",  "was",   "for",  "on",
    "are",   "with",  "as",    "his",   "they", "at",    "be",   "this",  "have",  "from",  "or",   "one",
    "had",   "by",    "word",  "but",   "not",  "what",  "all",  "were",  "we",    "when",  "your", "can",
    "said",  "there", "use",   "an",    "each", "which", "she",  "do",    "how",   "their", "if",   "will",
    "up",    "other", "about", "out",   "many", "then",  "them", "these", "so",    "some",  "her",  "would",
    "make",  "like",  "him",   "into",  "time", "has",   "look", "two",   "more",  "write", "go",   "see",
    "river", "hello", "there", "again", "town", "house", "rain", "water", "light", "story", "north"};

latte::Vocabulary make_vocabulary() {
  latte::Vocabulary v;
  v.model = "gpt2";
  v.pre = "gpt-2";
  const auto add = [&](std::string text, latte::TokenType type) {
    v.tokens.push_back(std::move(text));
    v.token_types.push_back(type);
  };
  add("<s>", latte::TokenType::control);
  add("</s>", latte::TokenType::control);
  v.bos = 0;
  v.eos = 1;
  v.add_bos = true;
  std::set<std::string> known;
  const auto byte_token = [](char c) { return latte::tokenizer::bytes_to_byte_level(std::string(1, c)); };
  for (int c = 0x20; c < 0x7F; ++c) known.insert(byte_token(static_cast<char>(c)));
  known.insert(byte_token('\n'));
  for (const std::string& t : known) add(t, latte::TokenType::normal);
  // Merges that build " word" left to right: "Ġ w" -> "Ġw", "Ġw o" -> "Ġwo", ...
  for (const char* word : kWords) {
    std::string current = byte_token(' ');
    for (const char* p = word; *p; ++p) {
      const std::string next = byte_token(*p);
      const std::string merged = current + next;
      if (!known.count(merged)) {
        known.insert(merged);
        v.merges.push_back(current + " " + next);
        add(merged, latte::TokenType::normal);
      }
      current = merged;
    }
  }
  v.chat_template = std::string(latte::ChatTemplate::plain_jinja());
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT.gguf [MAIN_LAYERS]\n", argv[0]);
    return 2;
  }
  try {
    latte::convert::TokenizerMetadata tokenizer;
    tokenizer.vocabulary = make_vocabulary();
    tokenizer.has_add_bos = true;
    (void)latte::Tokenizer::from_vocabulary(tokenizer.vocabulary);  // validates it
    latte::ModelConfig config = latte::model_preset("latte-tiny");
    config.name = "latte-chat-test";
    config.n_vocab = static_cast<int>(tokenizer.vocabulary.tokens.size());
    latte::set_main_layer_count(config, argc > 2 ? std::atoi(argv[2]) : 2);
    latte::RandomModelOptions options{.seed = 4242};
    options.extra_metadata = [&](latte::gguf::Writer& w) { tokenizer.write_to(w); };
    options.transform = [](std::string_view name, std::span<const uint64_t> ne, std::span<float> values) {
      if (name != "output.weight") return;
      const size_t row = ne[0];  // one row of n_embd values per token
      std::fill(values.begin(), values.begin() + 2 * static_cast<std::ptrdiff_t>(row), 0.0f);  // <s>, </s>
    };
    latte::write_random_model(config, argv[1], options);
  } catch (const latte::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
