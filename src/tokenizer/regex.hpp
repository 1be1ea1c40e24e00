// A small backtracking regular-expression engine over Unicode code points, with exactly the
// constructs the pre-tokenizer patterns of byte-level BPE tokenizers use: alternation, groups
// ((...), (?:...), (?i:...)), look-ahead ((?=...), (?!...)), classes with ranges, negation and
// \p{..}/\P{..}/\s/\S/\d/\D/\w/\W, the escapes \r \n \t \f \v \xHH \x{H..} \uHHHH, greedy quantifiers
// ? * + {n} {n,} {n,m}, and the anchors ^ and $ (start and end of the subject). Matching follows
// Perl/Oniguruma semantics: ordered alternation, greedy repetition with backtracking.
//
//   auto re = latte::tokenizer::Regex::compile("\\p{N}{1,3}");
//   re.split(decoded, 0, decoded.size(), pieces);   // matches and the gaps between them
#pragma once

#include "tokenizer/unicode.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace latte::tokenizer {

/// A half-open range [begin, end) of code point indices into a DecodedText.
struct Span {
  uint32_t begin = 0;
  uint32_t end = 0;
  friend bool operator==(const Span&, const Span&) = default;
};

/// A set of code points: explicit ranges plus Unicode property masks, optionally negated.
struct CharSet {
  bool negated = false;
  std::vector<std::pair<char32_t, char32_t>> ranges;  ///< inclusive
  unicode::Properties any_of = 0;                     ///< member if props & any_of
  std::vector<unicode::Properties> none_of;           ///< member if (props & m) == 0 for one m (\S, \P{..})
  std::array<uint64_t, 2> ascii{};                    ///< precomputed membership of U+0000..U+007F

  /// Whether `cp` (with properties `props`) is in the set.
  [[nodiscard]] bool contains(char32_t cp, unicode::Properties props) const noexcept {
    if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
    return contains_slow(cp, props);
  }
  [[nodiscard]] bool contains_slow(char32_t cp, unicode::Properties props) const noexcept;
  /// Fills `ascii` from the other members; call after building the set.
  void finish();
};

/// Reusable backtracking state; one per thread of matching (not shared between threads).
struct MatchScratch {
  struct Frame {
    uint32_t pc;     ///< instruction to resume at (for a repeat: the repeat instruction itself)
    uint32_t count;  ///< remaining repeat count to retry, or no_count for a plain alternative
    uint32_t pos;    ///< subject position to resume at (for a repeat: where the repeat began)
  };
  static constexpr uint32_t no_count = 0xFFFFFFFFu;
  std::vector<Frame> stack;
};

/// A compiled pattern. Immutable and thread-safe once compiled.
class Regex {
 public:
  /// Compiles a UTF-8 pattern. Throws Error(unsupported) naming the pattern and the offending
  /// construct for syntax outside the supported subset, Error(invalid_argument) for malformed syntax.
  static Regex compile(std::string_view pattern);

  /// The pattern text as given.
  [[nodiscard]] const std::string& pattern() const noexcept { return pattern_; }

  /// Tries to match starting exactly at `start` inside the subject [begin, end) of `text`.
  /// Returns the end of the match, or -1 when there is none.
  [[nodiscard]] int64_t match_at(const unicode::DecodedText& text, uint32_t begin, uint32_t end, uint32_t start,
                                 MatchScratch& scratch) const;

  /// Finds the leftmost match at or after `from` in [begin, end); returns {start, end} or
  /// {end, end} with found=false. Empty matches are skipped.
  [[nodiscard]] bool find(const unicode::DecodedText& text, uint32_t begin, uint32_t end, uint32_t from, Span& match,
                          MatchScratch& scratch) const;

  /// Splits the subject [begin, end) into consecutive pieces: every non-overlapping match and every
  /// non-empty gap between matches ("isolated" splitting). Appends to `out`.
  void split(const unicode::DecodedText& text, uint32_t begin, uint32_t end, std::vector<Span>& out,
             MatchScratch& scratch) const;

  enum class Op : uint8_t {
    set,             ///< consume one code point in sets[a]
    repeat,          ///< greedily consume min..max code points of sets[a], backtracking one at a time
    split,           ///< try a first, then b
    jump,            ///< continue at a
    look_ahead,      ///< run the sub-program at pc+1 (ends with look_end); continue at a if it matched
    look_ahead_not,  ///< same, continue at a if it did not match
    look_end,        ///< end of a look-ahead sub-program
    assert_begin,    ///< position is the subject's start
    assert_end,      ///< position is the subject's end
    match,           ///< success
  };
  struct Instruction {
    Op op;
    uint32_t a = 0;
    uint32_t b = 0;
    uint32_t min = 0;
    uint32_t max = 0;
  };

 private:
  friend class RegexCompiler;
  int64_t run(const unicode::DecodedText& text, uint32_t begin, uint32_t end, uint32_t pc, uint32_t pos,
              MatchScratch& scratch) const;
  [[nodiscard]] bool may_start_with(char32_t cp, unicode::Properties props) const noexcept {
    if (start_anything_) return true;
    if (cp < 128) return (start_ascii_[cp >> 6] >> (cp & 63)) & 1;
    return may_start_with_slow(cp, props);
  }
  [[nodiscard]] bool may_start_with_slow(char32_t cp, unicode::Properties props) const noexcept;

  std::string pattern_;
  std::vector<Instruction> program_;
  std::vector<CharSet> sets_;
  // Start filter: a match can only begin on a code point in one of these sets (unless nullable).
  bool start_anything_ = true;
  std::vector<uint32_t> start_sets_;
  std::array<uint64_t, 2> start_ascii_{};
};

}  // namespace latte::tokenizer
