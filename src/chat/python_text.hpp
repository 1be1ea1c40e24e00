// The few Python str operations that chat templates apply to message text, with Python's exact
// semantics (the templates run under CPython Jinja2), on UTF-8 strings.
#pragma once

#include <string_view>

namespace latte::chat {

/// str.strip() with no argument: removes leading and trailing characters for which Python's
/// str.isspace() is true (ASCII whitespace, \x1c-\x1f, U+0085, U+00A0, U+1680, U+2000-U+200A,
/// U+2028, U+2029, U+202F, U+205F, U+3000).
std::string_view python_strip(std::string_view text);

/// str.lstrip(chars) / str.rstrip(chars) for a set of ASCII characters.
std::string_view lstrip_chars(std::string_view text, std::string_view chars);
std::string_view rstrip_chars(std::string_view text, std::string_view chars);

/// text.split(sep)[0]: the text before the first `sep` (all of it when absent).
std::string_view before_first(std::string_view text, std::string_view sep);
/// text.split(sep)[-1]: the text after the last `sep` (all of it when absent).
std::string_view after_last(std::string_view text, std::string_view sep);

}  // namespace latte::chat
