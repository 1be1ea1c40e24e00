// GLM chat layouts, following the published templates of zai-org GLM-4.5/4.6 (role tags followed by
// a newline, "\n<think></think>" blocks) and GLM-4.7 / GLM-5 (no newlines, "</think>" marks a turn
// without kept reasoning, "<think>" opens the generated answer), for the template's default
// variables (enable_thinking and clear_thinking undefined).
#include "chat/chat_render.hpp"
#include "chat/python_text.hpp"

namespace latte::chat {
namespace {

struct AssistantParts {
  std::string_view reasoning;  // text between "<think>" and the first "</think>" ("" when none)
  std::string_view content;    // text after the last "</think>"
};

// The templates' extraction when the message has no separate reasoning_content:
//   reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
//   content   = content.split('</think>')[-1].lstrip('\n')
AssistantParts split_reasoning(std::string_view text) {
  if (text.find("</think>") == std::string_view::npos) return {{}, text};
  std::string_view reasoning = rstrip_chars(before_first(text, "</think>"), "\n");
  reasoning = lstrip_chars(after_last(reasoning, "<think>"), "\n");
  return {reasoning, lstrip_chars(after_last(text, "</think>"), "\n")};
}

}  // namespace

std::string render_glm(std::span<const Turn> turns, bool add_generation_prompt, bool glm45) {
  const std::string_view newline = glm45 ? "\n" : "";
  ptrdiff_t last_user = -1;
  for (size_t i = 0; i < turns.size(); ++i) {
    if (turns[i].role == Role::user) last_user = static_cast<ptrdiff_t>(i);
  }
  std::string out(kGlmPrefix);
  for (size_t i = 0; i < turns.size(); ++i) {
    const Turn& turn = turns[i];
    if (turn.role == Role::system || turn.role == Role::user) {
      out += turn.role == Role::system ? "<|system|>" : "<|user|>";
      out += newline;
      out += turn.content;
      continue;
    }
    const AssistantParts parts = split_reasoning(turn.content);
    out += "<|assistant|>";
    // Reasoning is kept only for turns after the last user turn, and only when non-empty (Python
    // truthiness of the unstripped string).
    const bool keep_reasoning = static_cast<ptrdiff_t>(i) > last_user && !parts.reasoning.empty();
    out += newline;
    if (keep_reasoning) {
      out += "<think>";
      out += python_strip(parts.reasoning);
      out += "</think>";
    } else {
      out += glm45 ? "<think></think>" : "</think>";
    }
    const std::string_view content = python_strip(parts.content);
    if (!content.empty()) {
      out += newline;
      out += content;
    }
  }
  if (add_generation_prompt) out += glm45 ? "<|assistant|>" : "<|assistant|><think>";
  return out;
}

}  // namespace latte::chat
