#include "conversation.hpp"

#include <latte/error.hpp>
#include <latte/stop_condition.hpp>
#include <latte/tokenizer.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>

namespace chat {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// Host data of a saved conversation: a header line, then per message "ROLE BYTES\n" + content + "\n".
constexpr std::string_view kSavedHeader = "latte-chat conversation 1\n";

std::string encode_messages(const std::string& system, const std::vector<latte::ChatMessage>& turns) {
  std::string out(kSavedHeader);
  const auto add = [&](const std::string& role, const std::string& content) {
    out += role + " " + std::to_string(content.size()) + "\n" + content + "\n";
  };
  add("system", system);
  for (const auto& m : turns) add(m.role, m.content);
  return out;
}

void decode_messages(std::string_view data, const std::string& path, std::string& system,
                     std::vector<latte::ChatMessage>& turns) {
  const auto bad = [&](const std::string& why) {
    return latte::Error(latte::ErrorCode::invalid_file, path + ": " + why);
  };
  if (data.substr(0, kSavedHeader.size()) != kSavedHeader) throw bad("the state holds no latte-chat conversation");
  data.remove_prefix(kSavedHeader.size());
  std::vector<latte::ChatMessage> messages;
  while (!data.empty()) {
    const size_t space = data.find(' ');
    const size_t newline = data.find('\n');
    if (space == std::string_view::npos || newline == std::string_view::npos || space > newline)
      throw bad("malformed conversation");
    size_t bytes = 0;
    const auto [end, ec] = std::from_chars(data.data() + space + 1, data.data() + newline, bytes);
    if (ec != std::errc() || end != data.data() + newline || bytes > data.size() - newline - 1 ||
        data.size() - newline - 1 - bytes < 1 || data[newline + 1 + bytes] != '\n')
      throw bad("malformed conversation");
    messages.push_back({std::string(data.substr(0, space)), std::string(data.substr(newline + 1, bytes))});
    data.remove_prefix(newline + 1 + bytes + 1);
  }
  if (messages.empty() || messages[0].role != "system") throw bad("malformed conversation (no system entry)");
  system = messages[0].content;
  turns.assign(messages.begin() + 1, messages.end());
}

}  // namespace

latte::ChatTemplate choose_template(const latte::Model& model, const std::string& name) {
  if (!name.empty()) return latte::ChatTemplate::named(name);
  const std::string& jinja = model.tokenizer().chat_template();
  if (jinja.empty()) return latte::ChatTemplate::named("plain");
  try {
    return latte::ChatTemplate::detect(jinja);
  } catch (const latte::Error& e) {
    throw latte::Error(e.code(), std::string(e.what()) + "; choose a format with --template NAME");
  }
}

int choose_context(const latte::Model& model, int requested) {
  if (requested > 0) return requested;
  const int trained = model.config().context_length;
  return trained > 0 ? std::min(trained, 4096) : 4096;
}

Conversation::Conversation(latte::Model model, const ChatOptions& options)
    : model_(model),
      params_{.n_ctx = choose_context(model, options.n_ctx),
              .attention = options.attention,
              .n_threads = options.n_threads},
      session_(model, params_),
      template_(choose_template(model, options.template_name)),
      sampler_(options.sampling),
      n_predict_(options.n_predict),
      system_(options.system) {
  const latte::Tokenizer& tok = model_.tokenizer();
  for (const std::string& text : template_.eog_token_texts()) {
    if (auto id = tok.find_token(text)) eog_tokens_.push_back(*id);
  }
  if (auto eos = tok.eos()) eog_tokens_.push_back(*eos);
}

std::vector<latte::ChatMessage> Conversation::messages() const {
  std::vector<latte::ChatMessage> all;
  if (!system_.empty()) all.push_back({"system", system_});
  all.insert(all.end(), turns_.begin(), turns_.end());
  return all;
}

ReplyStats Conversation::reply(std::string_view user_text, const std::function<void(std::string_view)>& on_text,
                               const std::function<bool()>& stop_requested) {
  const latte::Tokenizer& tok = model_.tokenizer();
  turns_.push_back({"user", std::string(user_text)});
  std::vector<latte::Token> prompt;
  ReplyStats stats;
  try {
    const std::string text = template_.apply(messages(), /*add_generation_prompt=*/true);
    prompt = tok.encode(text, {.add_special = !template_.renders_bos(), .parse_special = true});
    if (prompt.size() >= static_cast<size_t>(session_.n_ctx())) {
      throw latte::Error(latte::ErrorCode::context_overflow,
                         "the conversation is " + std::to_string(prompt.size()) + " tokens, the context holds " +
                             std::to_string(session_.n_ctx()) + ": /reset to start over (or use a larger --ctx)");
    }
    const auto start = clock_type::now();
    stats.prompt_tokens = static_cast<int>(prompt.size());
    stats.evaluated_tokens = session_.eval_reusing_prefix(prompt);
    stats.prompt_seconds = seconds_since(start);
  } catch (...) {
    turns_.pop_back();
    throw;
  }
  sampler_.accept(std::span(prompt).last(static_cast<size_t>(stats.evaluated_tokens)));

  latte::StopCondition stop(eog_tokens_, template_.stop_strings());
  latte::StreamDecoder decoder(tok, {.render_special = false});
  std::string answer;
  const auto emit = [&](const std::string& text) {
    if (text.empty()) return;
    answer += text;
    on_text(text);
  };
  const auto start = clock_type::now();
  for (int i = 0; i < n_predict_; ++i) {
    if (stop_requested()) {
      stats.interrupted = true;
      break;
    }
    if (session_.n_past() >= session_.n_ctx()) {
      stats.context_full = true;
      break;
    }
    const latte::Token token = sampler_.sample(session_.logits());
    ++stats.generated_tokens;
    latte::StopCondition::Step step = stop.push(token, decoder.push(token));
    emit(step.text);
    if (step.stop) break;
    session_.eval(std::span(&token, 1));
  }
  if (!stop.stopped()) {
    emit(stop.flush());
    emit(decoder.flush());
  }
  stats.generation_seconds = seconds_since(start);
  turns_.push_back({"assistant", answer});
  return stats;
}

void Conversation::reset() {
  turns_.clear();
  session_.reset();
  sampler_.reset();
}

void Conversation::save(const std::string& path) const { session_.save_state(path, encode_messages(system_, turns_)); }

void Conversation::load(const std::string& path) {
  // Read into a new session first, so that a failed load leaves this chat as it was.
  latte::Session loaded(model_, params_);
  const std::string data = loaded.load_state(path);
  std::string system;
  std::vector<latte::ChatMessage> turns;
  decode_messages(data, path, system, turns);
  session_ = std::move(loaded);
  system_ = std::move(system);
  turns_ = std::move(turns);
  sampler_.reset();
  sampler_.accept(session_.tokens());
}

}  // namespace chat
