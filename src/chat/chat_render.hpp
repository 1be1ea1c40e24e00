// Renderers for each ChatFormat (see include/latte/chat.hpp for the exact layouts). Each takes turns
// whose roles are already validated and reproduces the real template's output for them.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace latte::chat {

enum class Role { system, user, assistant };

/// One validated message: role and text.
struct Turn {
  Role role;
  std::string_view content;
};

// Special-token texts used by the formats (UTF-8: U+FF5C "｜" and U+2581 "▁" in DeepSeek's).
inline constexpr std::string_view kDeepseekBos =
    "<\xEF\xBD\x9C"
    "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
inline constexpr std::string_view kDeepseekEos =
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
inline constexpr std::string_view kDeepseekUser = "<\xEF\xBD\x9CUser\xEF\xBD\x9C>";
inline constexpr std::string_view kDeepseekAssistant =
    "<\xEF\xBD\x9C"
    "Assistant\xEF\xBD\x9C>";
inline constexpr std::string_view kGlmPrefix = "[gMASK]<sop>";

/// DeepSeek-V3 (`r1` false) and DeepSeek-R1 (`r1` true).
std::string render_deepseek_v3(std::span<const Turn> turns, bool add_generation_prompt, bool r1);
/// DeepSeek-V2 / V2-Lite chat ("User: ...\n\nAssistant: ...").
std::string render_deepseek_v2(std::span<const Turn> turns, bool add_generation_prompt);
/// GLM-4.7 / GLM-5 (`glm45` false) and GLM-4.5 / 4.6 (`glm45` true).
std::string render_glm(std::span<const Turn> turns, bool add_generation_prompt, bool glm45);
/// latte's plain format.
std::string render_plain(std::span<const Turn> turns, bool add_generation_prompt);

}  // namespace latte::chat
