// latte::ChatTemplate: format lookup by name, recognition of real Jinja templates, role checks, and
// the plain format.
#include "chat/chat_render.hpp"

#include <latte/chat.hpp>
#include <latte/error.hpp>

#include <algorithm>
#include <array>
#include <vector>

namespace latte {
namespace {

struct FormatInfo {
  ChatFormat format;
  std::string_view name;
};

constexpr std::array<FormatInfo, 6> kFormats{{
    {ChatFormat::deepseek_v3, "deepseek-v3"},
    {ChatFormat::deepseek_r1, "deepseek-r1"},
    {ChatFormat::deepseek_v2, "deepseek-v2"},
    {ChatFormat::glm, "glm"},
    {ChatFormat::glm45, "glm-4.5"},
    {ChatFormat::plain, "plain"},
}};
constexpr std::array<std::string_view, 6> kNames{"deepseek-v3", "deepseek-r1", "deepseek-v2",
                                                 "glm",         "glm-4.5",     "plain"};
constexpr std::array<FormatInfo, 4> kAliases{{
    {ChatFormat::deepseek_v3, "deepseek-v2.5"},
    {ChatFormat::glm, "glm-4.7"},
    {ChatFormat::glm, "glm-5"},
    {ChatFormat::glm45, "glm-4.6"},
}};

// Marker comment that identifies plain_jinja() when it comes back from a GGUF file.
constexpr std::string_view kPlainMarker = "latte plain chat format";
constexpr std::string_view kPlainJinja =
    "{#- latte plain chat format: 'Role: text' turns separated by blank lines -#}\n"
    "{%- for message in messages -%}\n"
    "{%- if message['role'] == 'system' -%}{{ 'System: ' + message['content'] + '\\n\\n' }}\n"
    "{%- elif message['role'] == 'user' -%}{{ 'User: ' + message['content'] + '\\n\\n' }}\n"
    "{%- elif message['role'] == 'assistant' -%}{{ 'Assistant: ' + message['content'] + '\\n\\n' }}\n"
    "{%- else -%}{{ raise_exception('unknown role: ' + message['role']) }}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{ 'Assistant:' }}{%- endif -%}\n";

bool contains(std::string_view text, std::string_view needle) { return text.find(needle) != std::string_view::npos; }

// The first `count` code points of `text`, with newlines shown as \n, for error messages.
std::string quote_start(std::string_view text, size_t count) {
  std::string out;
  size_t chars = 0;
  for (size_t i = 0; i < text.size() && chars < count; ++chars) {
    const auto lead = static_cast<unsigned char>(text[i]);
    size_t length = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    length = std::min(length, text.size() - i);
    if (text[i] == '\n') {
      out += "\\n";
    } else {
      out.append(text.substr(i, length));
    }
    i += length;
  }
  return out;
}

}  // namespace

namespace chat {

std::string render_plain(std::span<const Turn> turns, bool add_generation_prompt) {
  std::string out;
  for (const Turn& turn : turns) {
    out += turn.role == Role::system ? "System: " : turn.role == Role::user ? "User: " : "Assistant: ";
    out += turn.content;
    out += "\n\n";
  }
  if (add_generation_prompt) out += "Assistant:";
  return out;
}

}  // namespace chat

ChatTemplate::ChatTemplate(ChatFormat format) : format_(format) {
  switch (format) {
    case ChatFormat::deepseek_v2:
      // Its turns are plain-text role markers after a blank line: a reply that starts another turn
      // instead of ending with the end-of-sentence token has ended.
      stop_strings_ = {"\n\nUser:", "\n\nAssistant:"};
      [[fallthrough]];
    case ChatFormat::deepseek_v3:
    case ChatFormat::deepseek_r1:
      eog_token_texts_ = {std::string(chat::kDeepseekEos)};
      break;
    case ChatFormat::glm:
    case ChatFormat::glm45:
      eog_token_texts_ = {"<|endoftext|>", "<|user|>", "<|observation|>"};
      break;
    case ChatFormat::plain:
      // a turn of any role after a blank line ends the reply (the model may start another of its own)
      stop_strings_ = {"\n\nUser:", "\n\nSystem:", "\n\nAssistant:"};
      break;
  }
}

ChatTemplate ChatTemplate::named(std::string_view name) {
  for (const FormatInfo& info : kFormats) {
    if (info.name == name) return ChatTemplate(info.format);
  }
  for (const FormatInfo& info : kAliases) {
    if (info.name == name) return ChatTemplate(info.format);
  }
  std::string known;
  for (std::string_view n : kNames) known += (known.empty() ? "" : ", ") + std::string(n);
  for (const FormatInfo& info : kAliases) known += ", " + std::string(info.name);
  throw Error(ErrorCode::invalid_argument,
              "unknown chat template name '" + std::string(name) + "' (known: " + known + ")");
}

ChatTemplate ChatTemplate::detect(std::string_view src) {
  if (contains(src, kPlainMarker)) return ChatTemplate(ChatFormat::plain);
  if (contains(src, chat::kDeepseekUser) && contains(src, chat::kDeepseekAssistant)) {
    // DeepSeek-V3.1 and later switch reasoning with a template variable; their layout differs.
    if (contains(src, "thinking is defined") || contains(src, "enable_thinking")) {
      throw Error(ErrorCode::unsupported,
                  "unsupported chat template: a DeepSeek hybrid-thinking template (V3.1 or later): \"" +
                      quote_start(src, 80) + "\"");
    }
    return ChatTemplate(contains(src, "</think>") ? ChatFormat::deepseek_r1 : ChatFormat::deepseek_v3);
  }
  if (contains(src, "<|user|>") && contains(src, "<|assistant|>") &&
      (contains(src, "[gMASK]<sop>") || contains(src, "<think>"))) {
    // GLM-4.5/4.6 put a newline after each role tag and write empty "<think></think>" blocks;
    // GLM-4.7/5 put the text right after the tag and mark turns without reasoning by "</think>".
    if (contains(src, "<|user|>\n") && contains(src, "<think></think>")) return ChatTemplate(ChatFormat::glm45);
    if (contains(src, "<|user|>{{") && contains(src, "</think>")) return ChatTemplate(ChatFormat::glm);
  }
  if (contains(src, "User: ") && contains(src, "Assistant: ") &&
      (contains(src, "eos_token") || contains(src, chat::kDeepseekEos))) {
    return ChatTemplate(ChatFormat::deepseek_v2);
  }
  throw Error(ErrorCode::unsupported,
              "unsupported chat template (no DeepSeek-V2/V3/R1, GLM-4.5/4.7/5 or latte plain markers): \"" +
                  quote_start(src, 80) + "\"");
}

std::span<const std::string_view> ChatTemplate::names() noexcept { return kNames; }

std::string_view ChatTemplate::plain_jinja() noexcept { return kPlainJinja; }

std::string_view ChatTemplate::name() const noexcept {
  for (const FormatInfo& info : kFormats) {
    if (info.format == format_) return info.name;
  }
  return "unknown";
}

std::string_view ChatTemplate::bos_text() const noexcept {
  switch (format_) {
    case ChatFormat::deepseek_v3:
    case ChatFormat::deepseek_r1:
    case ChatFormat::deepseek_v2:
      return chat::kDeepseekBos;
    case ChatFormat::glm:
    case ChatFormat::glm45:
      return chat::kGlmPrefix;
    case ChatFormat::plain:
      return {};
  }
  return {};
}

std::string ChatTemplate::apply(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::vector<chat::Turn> turns;
  turns.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    chat::Role r;
    if (role == "system") {
      r = chat::Role::system;
    } else if (role == "user") {
      r = chat::Role::user;
    } else if (role == "assistant") {
      r = chat::Role::assistant;
    } else {
      throw Error(ErrorCode::invalid_argument, "chat message #" + std::to_string(i) + " has unknown role '" + role +
                                                   "' (expected system, user or assistant)");
    }
    turns.push_back({r, messages[i].content});
  }
  switch (format_) {
    case ChatFormat::deepseek_v3:
      return chat::render_deepseek_v3(turns, add_generation_prompt, false);
    case ChatFormat::deepseek_r1:
      return chat::render_deepseek_v3(turns, add_generation_prompt, true);
    case ChatFormat::deepseek_v2:
      return chat::render_deepseek_v2(turns, add_generation_prompt);
    case ChatFormat::glm:
      return chat::render_glm(turns, add_generation_prompt, false);
    case ChatFormat::glm45:
      return chat::render_glm(turns, add_generation_prompt, true);
    case ChatFormat::plain:
      return chat::render_plain(turns, add_generation_prompt);
  }
  throw Error(ErrorCode::internal, "ChatTemplate::apply: unhandled format");
}

}  // namespace latte
