// latte::StopCondition: EOG ids, stop strings split across tokens, held-back text and UTF-8 tails.
#include <doctest/doctest.h>

#include <latte/error.hpp>
#include <latte/stop_condition.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

using latte::StopCondition;
using latte::Token;

namespace {

struct Fed {
  std::string emitted;  // concatenation of every returned text (plus flush() when no stop)
  bool stopped = false;
  size_t steps = 0;  // pushes until the stop (or all of them)
};

// Feeds `pieces` (token id = index + 100, so none is an EOG id unless listed) until a stop.
Fed feed(StopCondition& stop, const std::vector<std::string>& pieces, const std::vector<Token>& ids = {}) {
  Fed fed;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Token id = i < ids.size() ? ids[i] : static_cast<Token>(100 + i);
    const StopCondition::Step step = stop.push(id, pieces[i]);
    fed.emitted += step.text;
    ++fed.steps;
    if (step.stop) {
      fed.stopped = true;
      return fed;
    }
  }
  fed.emitted += stop.flush();
  return fed;
}

}  // namespace

TEST_CASE("an EOG token stops generation and its text is not emitted") {
  StopCondition stop({2, 7}, {});
  const Fed fed = feed(stop, {"Hello", " world", "</s>", "never"}, {10, 11, 7, 12});
  CHECK(fed.stopped);
  CHECK(fed.steps == 3);
  CHECK(fed.emitted == "Hello world");
  CHECK(stop.stopped());
  CHECK(stop.push(13, "more").stop);
}

TEST_CASE("a stop string split across tokens is found and cut, text before it is emitted") {
  StopCondition stop({}, {"\n\nUser:"});
  const Fed fed = feed(stop, {"The answer", " is 4.", "\n", "\nUs", "er:", " next"});
  CHECK(fed.stopped);
  CHECK(fed.steps == 5);
  CHECK(fed.emitted == "The answer is 4.");
}

TEST_CASE("text that may start a stop string is held back until the next token decides") {
  StopCondition stop({}, {"STOP"});
  StopCondition::Step step = stop.push(1, "abcST");
  CHECK(step.text == "abc");  // "ST" could begin "STOP"
  CHECK_FALSE(step.stop);
  step = stop.push(2, "ART");  // "STAR..." cannot: everything goes out
  CHECK(step.text == "START");
  step = stop.push(3, "xS");
  CHECK(step.text == "x");
  CHECK(stop.flush() == "S");  // generation ended for another reason: release the held text
}

TEST_CASE("the earliest of several stop strings wins, including one inside a single piece") {
  StopCondition stop({}, {"<end>", "###"});
  const Fed fed = feed(stop, {"one ### two <end>"});
  CHECK(fed.stopped);
  CHECK(fed.emitted == "one ");
}

TEST_CASE("emitted text never ends inside a UTF-8 sequence") {
  StopCondition stop({}, {});
  const std::string snowman = "\xE2\x98\x83";  // U+2603, three bytes
  StopCondition::Step step = stop.push(1, std::string("a").append(snowman, 0, 1));
  CHECK(step.text == "a");
  step = stop.push(2, snowman.substr(1, 1));
  CHECK(step.text.empty());
  step = stop.push(3, snowman.substr(2) + "b");
  CHECK(step.text == snowman + "b");
}

TEST_CASE("streamed output equals the text before the first stop string, for random splits") {
  const uint64_t seed = std::random_device{}();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const std::vector<std::string> stops{"\n\nUser:", "<|end|>", "ab"};
  const std::string alphabet = "abcd \n:<|>Uendser";
  std::uniform_int_distribution<size_t> letter(0, alphabet.size() - 1);
  std::uniform_int_distribution<size_t> piece_length(1, 4);
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    for (int i = 0; i < 30; ++i) text += alphabet[letter(rng)];
    size_t first = std::string::npos;  // independent expectation: earliest occurrence of any stop
    for (const std::string& s : stops) first = std::min(first, text.find(s));
    std::vector<std::string> pieces;
    for (size_t at = 0; at < text.size();) {
      const size_t len = std::min(piece_length(rng), text.size() - at);
      pieces.push_back(text.substr(at, len));
      at += len;
    }
    StopCondition stop({}, stops);
    const Fed fed = feed(stop, pieces);
    CAPTURE(text);
    CHECK(fed.stopped == (first != std::string::npos));
    CHECK(fed.emitted == text.substr(0, first));
  }
}

TEST_CASE("a negative EOG id or an empty stop string is rejected") {
  CHECK_THROWS_AS(StopCondition({-1}, {}), latte::Error);
  CHECK_THROWS_AS(StopCondition({}, {"ok", ""}), latte::Error);
}
