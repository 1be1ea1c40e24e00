// A chat over one Session: the messages, their rendering with the model's chat template, prefix
// reuse between turns (only new tokens are evaluated), streamed sampling with stop markers, and
// saving / loading the whole conversation in a session state file.
//
//   chat::Conversation c(model, options);
//   auto stats = c.reply("Hello", [](std::string_view t) { std::cout << t << std::flush; }, [] { return false; });
#pragma once

#include "chat_options.hpp"

#include <latte/chat.hpp>
#include <latte/model.hpp>
#include <latte/sampler.hpp>
#include <latte/session.hpp>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace chat {

/// What one reply took.
struct ReplyStats {
  int prompt_tokens = 0;     ///< tokens of the whole rendered conversation
  int evaluated_tokens = 0;  ///< of those, evaluated now (the rest were reused from the cache)
  double prompt_seconds = 0.0;
  int generated_tokens = 0;  ///< tokens sampled for the reply
  double generation_seconds = 0.0;
  bool interrupted = false;   ///< stopped by the caller
  bool context_full = false;  ///< stopped because the session reached n_ctx
};

class Conversation {
 public:
  Conversation(latte::Model model, const ChatOptions& options);

  /// Adds a user turn, evaluates the conversation (reusing the cached prefix) and samples the
  /// assistant's reply, passing its text to `on_text` as it is produced; `stop_requested` is polled
  /// after every token. The reply (whole or interrupted) becomes part of the conversation. Throws
  /// latte::Error (context_overflow when the conversation no longer fits; the user turn is dropped).
  ReplyStats reply(std::string_view user_text, const std::function<void(std::string_view)>& on_text,
                   const std::function<bool()>& stop_requested);

  /// Sets (or, with "", removes) the system message; it applies from the next reply.
  void set_system(std::string text) { system_ = std::move(text); }
  /// Forgets every turn (the system message stays) and empties the session.
  void reset();
  /// Saves the session state with the messages as its host data.
  void save(const std::string& path) const;
  /// Loads a state saved by save(): the session and the messages.
  void load(const std::string& path);

  [[nodiscard]] const latte::Session& session() const noexcept { return session_; }
  [[nodiscard]] const latte::ChatTemplate& chat_template() const noexcept { return template_; }
  [[nodiscard]] size_t turns() const noexcept { return turns_.size(); }
  [[nodiscard]] const std::string& system() const noexcept { return system_; }

 private:
  [[nodiscard]] std::vector<latte::ChatMessage> messages() const;

  latte::Model model_;
  latte::SessionParams params_;
  latte::Session session_;
  latte::ChatTemplate template_;
  latte::Sampler sampler_;
  int n_predict_;
  std::string system_;
  std::vector<latte::ChatMessage> turns_;  // user and assistant messages, in order
  std::vector<latte::Token> eog_tokens_;
};

/// The chat template for `model`: `name` when given, else the one its GGUF names
/// (tokenizer.chat_template), else "plain". Throws latte::Error for an unknown name or template.
latte::ChatTemplate choose_template(const latte::Model& model, const std::string& name);

/// The session size: `requested` when > 0, else the model's context length capped at 4096.
int choose_context(const latte::Model& model, int requested);

}  // namespace chat
