// Parsing of the --tokens argument and integer options shared by `latte logits` and `latte generate`.
#pragma once

#include <latte/error.hpp>
#include <latte/token.hpp>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace latte::cli {

/// Parses token ids separated by spaces or commas ("1 2 3", "1,2,3"). Throws
/// Error(invalid_argument) naming the first item that is not a non-negative 32-bit integer.
inline std::vector<Token> parse_token_list(const std::string& text) {
  std::vector<Token> ids;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == ',' || text[i] == '\t' || text[i] == '\n')) ++i;
    if (i >= text.size()) break;
    size_t j = i;
    while (j < text.size() && !(text[j] == ' ' || text[j] == ',' || text[j] == '\t' || text[j] == '\n')) ++j;
    const std::string item = text.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (end != item.c_str() + item.size() || errno != 0 || v < 0 || v > 2147483647LL) {
      throw Error(ErrorCode::invalid_argument, "--tokens: '" + item + "' is not a token id");
    }
    ids.push_back(static_cast<Token>(v));
    i = j;
  }
  if (ids.empty()) throw Error(ErrorCode::invalid_argument, "--tokens: no token ids given");
  return ids;
}

/// Parses an integer option value; throws Error(invalid_argument) naming the option otherwise.
inline int parse_int_option(const std::string& option, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || v < -2147483647LL || v > 2147483647LL) {
    throw Error(ErrorCode::invalid_argument, option + ": '" + text + "' is not an integer");
  }
  return static_cast<int>(v);
}

/// Parses a floating-point option value; throws Error(invalid_argument) naming the option otherwise.
inline double parse_double_option(const std::string& option, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || !std::isfinite(v)) {
    throw Error(ErrorCode::invalid_argument, option + ": '" + text + "' is not a number");
  }
  return v;
}

/// The context a session needs for `positions` tokens (a sum the caller makes in 64 bits, e.g. prompt + -n):
/// throws Error(invalid_argument) saying what asked for it when it is past the largest n_ctx (2^31 - 1).
inline int context_positions(int64_t positions, const std::string& what) {
  if (positions > 2147483647LL) {
    throw Error(ErrorCode::invalid_argument, what + " needs a context of " + std::to_string(positions) +
                                                 " positions, more than a session can hold (2147483647)");
  }
  return static_cast<int>(positions);
}

}  // namespace latte::cli
