// DeepSeek chat layouts, following the published templates of deepseek-ai/DeepSeek-V3,
// DeepSeek-R1 and DeepSeek-V2-Lite-Chat for system, user and assistant messages.
#include "chat/chat_render.hpp"
#include "chat/python_text.hpp"

namespace latte::chat {

std::string render_deepseek_v3(std::span<const Turn> turns, bool add_generation_prompt, bool r1) {
  // The templates first gather every system message, joined by "\n\n", right after BOS.
  std::string out(kDeepseekBos);
  bool first_system = true;
  for (const Turn& turn : turns) {
    if (turn.role != Role::system) continue;
    if (!first_system) out += "\n\n";
    out += turn.content;
    first_system = false;
  }
  for (const Turn& turn : turns) {
    if (turn.role == Role::user) {
      out += kDeepseekUser;
      out += turn.content;
    } else if (turn.role == Role::assistant) {
      // R1 drops past reasoning: only the text after the last "</think>" is kept (not stripped).
      const std::string_view content = r1 ? after_last(turn.content, "</think>") : turn.content;
      out += kDeepseekAssistant;
      out += content;
      out += kDeepseekEos;
    }
  }
  if (add_generation_prompt) {
    out += kDeepseekAssistant;
    if (r1) out += "<think>\n";
  }
  return out;
}

std::string render_deepseek_v2(std::span<const Turn> turns, bool add_generation_prompt) {
  std::string out(kDeepseekBos);
  for (const Turn& turn : turns) {
    switch (turn.role) {
      case Role::system:
        out += turn.content;
        out += "\n\n";
        break;
      case Role::user:
        out += "User: ";
        out += turn.content;
        out += "\n\n";
        break;
      case Role::assistant:
        out += "Assistant: ";
        out += turn.content;
        out += kDeepseekEos;
        break;
    }
  }
  if (add_generation_prompt) out += "Assistant:";
  return out;
}

}  // namespace latte::chat
