// Pre-tokenizers of byte-level BPE vocabularies: the text is cut into pieces by a cascade of
// regexes (each splits every piece of the previous one into its matches and the gaps between them,
// as Hugging Face's Split(behavior = Isolated) does), and BPE then runs on each piece separately.
//
//   auto pre = latte::tokenizer::PreTokenizer::for_name("deepseek-v3");
//   std::vector<std::string> pieces = pre.split("Hello world 12345");  // "Hello" " world" " " "123" "45"
#pragma once

#include "tokenizer/regex.hpp"
#include "tokenizer/unicode.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace latte::tokenizer {

/// A known pre-tokenizer: its canonical GGUF name, accepted aliases and its regex cascade.
struct PreTokenizerSpec {
  std::string_view name;                   ///< value written to tokenizer.ggml.pre
  std::vector<std::string_view> aliases;   ///< other tokenizer.ggml.pre values meaning the same split
  std::vector<std::string_view> patterns;  ///< the cascade, in order (Hugging Face tokenizer.json syntax)
  /// Alternative spellings of the same cascade seen in the wild (e.g. (?i:...) rewritten as classes).
  std::vector<std::vector<std::string_view>> equivalent_patterns;
};

/// All supported pre-tokenizers.
const std::vector<PreTokenizerSpec>& known_pre_tokenizers();

/// The pre-tokenizer name whose cascade equals `patterns` (compared after decoding \x{..}, \u....,
/// \U........, \r, \n and \t escapes to the characters they stand for), or nullopt.
std::optional<std::string> detect_pre_tokenizer(std::span<const std::string> patterns);

/// Working memory for PreTokenizer::split; reuse it across calls on one thread.
struct PreTokenizeScratch {
  MatchScratch match;
  std::vector<Span> next;
};

/// A compiled regex cascade. Immutable and thread-safe.
class PreTokenizer {
 public:
  /// The pre-tokenizer for a tokenizer.ggml.pre value. Throws Error(unsupported) naming `name`
  /// and the supported names when it is unknown.
  static PreTokenizer for_name(std::string_view name);
  /// A cascade from explicit patterns (tests, experiments).
  static PreTokenizer from_patterns(std::string name, std::span<const std::string_view> patterns);

  /// Canonical name ("deepseek-v3", ...).
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

  /// Splits the code points [begin, end) of `text` into pieces, stored in order in `pieces`
  /// (whose previous content is discarded).
  void split(const unicode::DecodedText& text, uint32_t begin, uint32_t end, std::vector<Span>& pieces,
             PreTokenizeScratch& scratch) const;
  /// Convenience: the pieces of a UTF-8 string (invalid bytes stay as they are inside the pieces).
  [[nodiscard]] std::vector<std::string> split(std::string_view text) const;

 private:
  std::string name_;
  std::vector<Regex> regexes_;
};

}  // namespace latte::tokenizer
