// latte::StopCondition — tells a generation loop when to stop and which text it may show so far.
//
//   latte::StopCondition stop({eos_id}, {"\n\nUser:"});
//   auto step = stop.push(token, piece_text);  std::cout << step.text;  if (step.stop) break;
//
// It stops on an end-of-generation token id, or when a stop string appears in the decoded text, even
// when the stop string is split across several tokens. Text that might be the start of a stop
// string is held back until the next tokens decide; the text returned never contains a stop string
// and never ends inside a UTF-8 sequence (flush() returns whatever is still held at the end).
#pragma once

#include <latte/error.hpp>
#include <latte/token.hpp>

#include <algorithm>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace latte {

/// End-of-generation ids and stop strings, matched over the decoded text tail.
class StopCondition {
 public:
  /// What the caller should do after one token.
  struct Step {
    std::string text;   ///< text that is now safe to emit (may be empty)
    bool stop = false;  ///< true: generation is over; `text` excludes the EOG token and the stop string
  };

  /// `eog_tokens`: ids that end generation (their text is never emitted). `stop_strings`: texts that
  /// end generation where they appear; each must be non-empty. Throws Error(invalid_argument) for a
  /// negative id or an empty stop string.
  StopCondition(std::span<const Token> eog_tokens, std::span<const std::string> stop_strings)
      : eog_(eog_tokens.begin(), eog_tokens.end()), stops_(stop_strings.begin(), stop_strings.end()) {
    for (Token id : eog_) {
      if (id < 0)
        throw Error(ErrorCode::invalid_argument, "StopCondition: EOG token id " + std::to_string(id) + " < 0");
    }
    for (size_t i = 0; i < stops_.size(); ++i) {
      if (stops_[i].empty())
        throw Error(ErrorCode::invalid_argument, "StopCondition: stop string #" + std::to_string(i) + " is empty");
      longest_stop_ = std::max(longest_stop_, stops_[i].size());
    }
    std::sort(eog_.begin(), eog_.end());
  }
  StopCondition(std::initializer_list<Token> eog_tokens, std::initializer_list<std::string> stop_strings)
      : StopCondition(std::span<const Token>(eog_tokens.begin(), eog_tokens.size()),
                      std::span<const std::string>(stop_strings.begin(), stop_strings.size())) {}

  /// Feeds one generated token and its decoded text. After a stop, further pushes return {"", true}.
  Step push(Token token, std::string_view piece) {
    if (stopped_) return {"", true};
    if (std::binary_search(eog_.begin(), eog_.end(), token)) {
      stopped_ = true;
      return {std::exchange(pending_, {}), true};
    }
    pending_.append(piece);
    size_t first = std::string::npos;  // earliest stop string occurrence in the pending text
    for (const std::string& stop : stops_) first = std::min(first, pending_.find(stop));
    if (first != std::string::npos) {
      stopped_ = true;
      std::string text = pending_.substr(0, first);
      pending_.clear();
      return {std::move(text), true};
    }
    const size_t keep = std::max(held_for_stop_strings(), held_for_utf8());
    std::string text = pending_.substr(0, pending_.size() - keep);
    pending_.erase(0, pending_.size() - keep);
    return {std::move(text), false};
  }

  /// Returns and clears the text still held back (call when generation ends for another reason).
  std::string flush() { return std::exchange(pending_, {}); }

  /// Whether an EOG token or a stop string has been seen.
  [[nodiscard]] bool stopped() const noexcept { return stopped_; }

 private:
  // Length of the longest suffix of pending_ that is a proper prefix of some stop string.
  size_t held_for_stop_strings() const {
    const size_t max_len = std::min(pending_.size(), longest_stop_ == 0 ? 0 : longest_stop_ - 1);
    for (size_t len = max_len; len > 0; --len) {
      const std::string_view tail = std::string_view(pending_).substr(pending_.size() - len);
      for (const std::string& stop : stops_) {
        if (stop.size() > len && std::string_view(stop).substr(0, len) == tail) return len;
      }
    }
    return 0;
  }

  // Length of an incomplete UTF-8 sequence at the end of pending_ (0 to 3 bytes).
  size_t held_for_utf8() const {
    const size_t n = pending_.size();
    for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
      const auto byte = static_cast<unsigned char>(pending_[n - back]);
      if ((byte & 0xC0) == 0x80) continue;  // continuation byte: look further back for the lead byte
      const size_t needed = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
      return needed > back ? back : 0;
    }
    return 0;
  }

  std::vector<Token> eog_;  // sorted
  std::vector<std::string> stops_;
  size_t longest_stop_ = 0;  // bytes
  std::string pending_;      // decoded text not yet returned
  bool stopped_ = false;
};

}  // namespace latte
