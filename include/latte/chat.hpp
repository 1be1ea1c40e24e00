// latte::ChatTemplate — renders a conversation into the exact prompt text a model was trained on.
//
//   auto tmpl = latte::ChatTemplate::detect(jinja_source_from_gguf);   // or ChatTemplate::named("glm")
//   std::string prompt = tmpl.apply(messages, /*add_generation_prompt=*/true);
//
// latte does not interpret Jinja. It recognises the published templates of the models it runs by
// their distinctive content and renders them with its own code, reproducing what Hugging Face
// transformers' Jinja rendering of the real template gives for system, user and assistant turns
// (tests/data/chat_templates/ holds the real templates and their renders as the test oracle).
//
// Formats (named() accepts the names in quotes):
//   "deepseek-v3"  DeepSeek-V3 (also V2.5): BOS, the system texts joined by "\n\n", then
//                  "<｜User｜>" + text and "<｜Assistant｜>" + text + "<｜end▁of▁sentence｜>";
//                  generation prompt "<｜Assistant｜>". (V2.5's own template keeps only the last
//                  system message; with several system messages the two differ.)
//   "deepseek-r1"  DeepSeek-R1: as deepseek-v3, but a past assistant turn keeps only the text after
//                  its last "</think>", and the generation prompt is "<｜Assistant｜><think>\n".
//   "deepseek-v2"  DeepSeek-V2 / V2-Lite chat: BOS, then in order: system text + "\n\n",
//                  "User: " + text + "\n\n", "Assistant: " + text + "<｜end▁of▁sentence｜>";
//                  generation prompt "Assistant:".
//   "glm"          GLM-4.7 and GLM-5 (aliases "glm-4.7", "glm-5"): "[gMASK]<sop>", then
//                  "<|system|>" + text, "<|user|>" + text, "<|assistant|>" + think + stripped text
//                  where think is "<think>" + reasoning + "</think>" for an assistant turn after the
//                  last user turn that carries reasoning ("<think>…</think>" in its text) and
//                  "</think>" otherwise; generation prompt "<|assistant|><think>" (thinking on).
//   "glm-4.5"      GLM-4.5 / 4.6 (alias "glm-4.6"): as "glm" but every role tag is followed by "\n",
//                  the think part is "\n<think>" + reasoning + "</think>" or "\n<think></think>", the
//                  stripped text is preceded by "\n", and the generation prompt is "<|assistant|>".
//   "plain"        a minimal format for text-completion models without chat tokens: "System: " /
//                  "User: " / "Assistant: " + text + "\n\n" per turn, generation prompt
//                  "Assistant:"; no BOS in the text (the tokenizer adds its own). plain_jinja() is
//                  the same format as a Jinja template for GGUF files. (latte's small models trained
//                  by tools/train_tiny carry the DeepSeek-V2 layout, which detect() maps to
//                  "deepseek-v2".)
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace latte {

/// One conversation turn.
struct ChatMessage {
  std::string role;     ///< "system", "user" or "assistant"; anything else is rejected by apply()
  std::string content;  ///< the text; an assistant turn may carry "<think>…</think>" reasoning
};

/// The prompt layouts latte can render (see the header comment for each one's exact strings).
enum class ChatFormat { deepseek_v3, deepseek_r1, deepseek_v2, glm, glm45, plain };

/// A chat prompt format: rendering plus the facts a generation loop needs (BOS, stop markers).
class ChatTemplate {
 public:
  /// The format called `name` ("deepseek-v3", "deepseek-r1", "deepseek-v2", "glm", "glm-4.5",
  /// "plain" or an alias listed above). Throws Error(invalid_argument) listing the known names.
  static ChatTemplate named(std::string_view name);

  /// Recognises a model's Jinja chat template (e.g. GGUF tokenizer.chat_template) by distinctive
  /// content: '<｜User｜>' (DeepSeek-V3/R1, '</think>' telling R1 apart), 'User: ' with 'Assistant: '
  /// (DeepSeek-V2), '[gMASK]<sop>' with '<|user|>' (GLM; a newline after the tag means GLM-4.5).
  /// Throws Error(unsupported) quoting the template's first 80 characters when nothing matches.
  static ChatTemplate detect(std::string_view jinja_source);

  /// The canonical names accepted by named().
  static std::span<const std::string_view> names() noexcept;

  /// The "plain" format as a Jinja template (Hugging Face conventions), for files latte writes.
  static std::string_view plain_jinja() noexcept;

  /// Renders `messages` in order; with `add_generation_prompt` appends the text that opens the
  /// assistant's answer. Throws Error(invalid_argument) naming the index and role of a message
  /// whose role is not system, user or assistant.
  [[nodiscard]] std::string apply(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  /// Which layout this is.
  [[nodiscard]] ChatFormat format() const noexcept { return format_; }
  /// The canonical name ("deepseek-r1", ...).
  [[nodiscard]] std::string_view name() const noexcept;
  /// The text apply() puts first to start a sequence ("<｜begin▁of▁sentence｜>", "[gMASK]<sop>"), or
  /// "" for plain.
  [[nodiscard]] std::string_view bos_text() const noexcept;
  /// True when apply()'s output already starts with the sequence-start tokens (bos_text()): tokenize
  /// it without adding the tokenizer's own BOS, or BOS is duplicated.
  [[nodiscard]] bool renders_bos() const noexcept { return !bos_text().empty(); }
  /// Texts of the special tokens that end an assistant turn; map them to ids with the tokenizer.
  [[nodiscard]] std::span<const std::string> eog_token_texts() const noexcept { return eog_token_texts_; }
  /// Plain-text markers that end an assistant turn (for StopCondition); may be empty.
  [[nodiscard]] std::span<const std::string> stop_strings() const noexcept { return stop_strings_; }

 private:
  explicit ChatTemplate(ChatFormat format);

  ChatFormat format_;
  std::vector<std::string> eog_token_texts_;
  std::vector<std::string> stop_strings_;
};

}  // namespace latte
