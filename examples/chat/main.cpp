// latte-chat: an interactive chat (or one answer with -p) with an MLA model from a GGUF file.
//
//   latte-chat                                  # the model shipped with latte, on the CPU
//   latte-chat --model DeepSeek-V2-Lite-Chat.Q4_K_M.gguf --attention standard --temp 0.7
//   latte-chat -p "Tell me about the weather." -n 64 --seed 1 > answer.txt
//
// Everything model-related goes through the public API: Model::load (with a progress bar),
// Session (prefix reuse between turns, save_state / load_state), Sampler, StreamDecoder,
// StopCondition and ChatTemplate. The rest is terminal handling.
#include "chat_options.hpp"
#include "conversation.hpp"
#include "terminal.hpp"

#include <latte/device.hpp>
#include <latte/error.hpp>
#include <latte/model.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#ifndef LATTE_DEFAULT_MODEL
#define LATTE_DEFAULT_MODEL "models/latte-tiny-brown.gguf"
#endif

namespace {

std::string perf_line(const chat::ReplyStats& s) {
  const auto rate = [](double n, double seconds) { return seconds > 0.0 ? n / seconds : 0.0; };
  char text[256];
  std::snprintf(text, sizeof text, "[prompt %d tokens, %d evaluated, %.1f t/s | reply %d tokens, %.1f t/s%s]\n",
                s.prompt_tokens, s.evaluated_tokens, rate(s.evaluated_tokens, s.prompt_seconds), s.generated_tokens,
                rate(s.generated_tokens, s.generation_seconds),
                s.interrupted    ? " | interrupted"
                : s.context_full ? " | context full"
                                 : "");
  return text;
}

latte::Model load_model(const chat::ChatOptions& options) {
  if (options.model_is_default && !std::filesystem::exists(options.model_path)) {
    throw latte::Error(latte::ErrorCode::not_found,
                       "the default model " + options.model_path + " is missing; pass --model FILE.gguf");
  }
  const std::string name = std::filesystem::path(options.model_path).filename().string();
  const bool bar = chat::stderr_is_terminal() && !options.prompt;
  bool drawn = false;
  latte::ModelParams params{.device = latte::Device::parse(options.device)};
  if (bar) {
    params.on_progress = [&](float f) {
      chat::draw_progress(name, f);
      drawn = f < 1.0f;
      return true;
    };
  }
  try {
    return latte::Model::load(options.model_path, std::move(params));
  } catch (...) {
    if (drawn) chat::write_err("\n");
    throw;
  }
}

// One line starting with '/'. Returns false for /quit.
bool run_command(chat::Conversation& chat, const std::string& line) {
  const size_t space = line.find(' ');
  const std::string command = line.substr(0, space);
  std::string argument = space == std::string::npos ? "" : line.substr(space + 1);
  while (!argument.empty() && argument.back() == ' ') argument.pop_back();
  const auto need_argument = [&](const char* what) {
    if (argument.empty()) throw latte::Error(latte::ErrorCode::invalid_argument, command + " needs " + what);
  };
  if (command == "/quit" || command == "/exit") return false;
  if (command == "/help") {
    chat::write_out(
        "/reset        forget the conversation (the system message stays)\n"
        "/save FILE    save the conversation and its cache\n"
        "/load FILE    continue a saved conversation\n"
        "/system TEXT  set the system message (/system alone removes it)\n"
        "/quit         leave (also Ctrl-D, or Ctrl-C at the prompt after a stopped reply)\n");
  } else if (command == "/reset") {
    chat.reset();
    chat::write_out("(conversation reset)\n");
  } else if (command == "/save") {
    need_argument("a file name");
    chat.save(argument);
    chat::write_out("(saved " + std::to_string(chat.turns()) + " messages, " + std::to_string(chat.session().n_past()) +
                    " tokens to " + argument + ")\n");
  } else if (command == "/load") {
    need_argument("a file name");
    chat.load(argument);
    chat::write_out("(loaded " + std::to_string(chat.turns()) + " messages, " +
                    std::to_string(chat.session().n_past()) + " tokens from " + argument + ")\n");
  } else if (command == "/system") {
    chat.set_system(argument);
    chat::write_out(argument.empty() ? "(system message removed)\n" : "(system message set)\n");
  } else {
    chat::write_out("unknown command " + command + " (/help lists them)\n");
  }
  return true;
}

chat::ReplyStats answer(chat::Conversation& chat, const std::string& text) {
  chat::clear_interrupt();
  chat::ReplyStats stats = chat.reply(
      text, [](std::string_view piece) { chat::write_out(piece); }, [] { return chat::interrupted(); });
  chat::clear_interrupt();  // the Ctrl-C that stopped the reply is used up
  return stats;
}

int run_interactive(chat::Conversation& chat, const latte::Model& model) {
  const bool terminal = chat::stdin_is_terminal();
  chat::write_err("latte-chat: " + model.config().name + " (" + std::to_string(model.config().n_layer_main()) +
                  " layers, vocabulary " + std::to_string(model.config().n_vocab) + "), attention " +
                  chat.session().backend_name() + ", context " + std::to_string(chat.session().n_ctx()) +
                  " tokens, template " + std::string(chat.chat_template().name()) +
                  ". /help for commands, Ctrl-C stops a reply.\n");
  bool exit_on_interrupt = false;  // set by a Ctrl-C; a following Ctrl-C at the prompt exits
  std::string line;
  for (;;) {
    if (terminal) chat::write_out("> ");
    const chat::ReadResult r = chat::read_line(line);
    if (r == chat::ReadResult::end_of_input) {
      if (terminal) chat::write_out("\n");
      return 0;
    }
    if (r == chat::ReadResult::interrupted) {
      chat::clear_interrupt();
      if (exit_on_interrupt) {
        chat::write_out("\n");
        return 0;
      }
      exit_on_interrupt = true;
      chat::write_out("\n(Ctrl-C again or /quit to leave)\n");
      continue;
    }
    exit_on_interrupt = false;
    if (line.empty()) continue;
    try {
      if (line[0] == '/') {
        if (!run_command(chat, line)) return 0;
        continue;
      }
      const chat::ReplyStats stats = answer(chat, line);
      chat::write_out(stats.interrupted ? "\n[interrupted]\n" : "\n");
      exit_on_interrupt = stats.interrupted;
      chat::write_err(perf_line(stats));
    } catch (const latte::Error& e) {
      chat::write_out("\n");
      chat::write_err(std::string("error: ") + e.what() + "\n");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const chat::ChatOptions options = chat::parse_chat_options(argc, argv, LATTE_DEFAULT_MODEL);
    if (options.help) {
      chat::write_out(chat::chat_usage());
      return 0;
    }
    const latte::Model model = load_model(options);
    chat::Conversation chat(model, options);
    chat::install_interrupt_handler();
    if (options.prompt) {
      const chat::ReplyStats stats = answer(chat, *options.prompt);
      chat::write_out("\n");
      chat::write_err(perf_line(stats));
      return stats.interrupted ? 130 : 0;
    }
    return run_interactive(chat, model);
  } catch (const latte::Error& e) {
    chat::write_err(std::string("latte-chat: error: ") + e.what() + "\n");
    return 1;
  } catch (const std::exception& e) {
    chat::write_err(std::string("latte-chat: error: ") + e.what() + "\n");
    return 1;
  }
}
