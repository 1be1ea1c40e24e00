#include "chat_options.hpp"

#include <latte/error.hpp>

#include <charconv>
#include <chrono>
#include <string_view>
#include <system_error>

namespace chat {

namespace {

using latte::Error;
using latte::ErrorCode;

template <class T>
T parse_number(std::string_view flag, const std::string& text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw Error(ErrorCode::invalid_argument, std::string(flag) + ": '" + text + "' is not a valid number");
  }
  return value;
}

}  // namespace

const char* chat_usage() {
  return "usage: latte-chat [options]\n"
         "Chat with an MLA model (DeepSeek-V2/V3/R1, GLM) on the CPU or a GPU. Without --model it runs the\n"
         "small model shipped with latte. In the chat: /reset /save FILE /load FILE /system TEXT /help /quit;\n"
         "Ctrl-C stops a reply, Ctrl-C at the prompt (after a stopped reply, or twice) exits.\n"
         "  -m, --model FILE        GGUF model (default: the shipped model)\n"
         "  -p, --prompt TEXT       answer this prompt on stdout and exit (no interaction)\n"
         "  -n, --n-predict N       most tokens per reply (default 256)\n"
         "  --system TEXT           system message\n"
         "  --template NAME         chat template instead of the model's: deepseek-v3 | deepseek-r1 |\n"
         "                          deepseek-v2 | glm | glm-4.5 | plain\n"
         "  --attention NAME        mla | standard | auto (default auto)\n"
         "  --device DEV            cpu | cuda:N (default cpu)\n"
         "  -t, --threads N         CPU threads (default: all cores)\n"
         "  -c, --ctx N             context size in tokens (default: the model's, at most 4096)\n"
         "  --temp T                temperature, 0 = greedy (default 0.8)\n"
         "  --top-k K               keep the K most likely tokens, 0 = off (default 40)\n"
         "  --top-p P               nucleus sampling, 1 = off (default 0.95)\n"
         "  --min-p P               drop tokens below P times the best one's probability (default 0.05)\n"
         "  --repeat-penalty R      penalty for tokens of the last 64, 1 = off (default 1.0)\n"
         "  --seed S                random seed (default: from the clock)\n"
         "  -h, --help              this text\n";
}

ChatOptions parse_chat_options(int argc, char** argv, const std::string& default_model) {
  ChatOptions o;
  o.model_path = default_model;
  o.sampling.seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool inline_value = false;
    if (arg.rfind("--", 0) == 0) {
      if (const size_t eq = arg.find('='); eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        inline_value = true;
      }
    }
    const auto next = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= argc) throw Error(ErrorCode::invalid_argument, arg + " needs a value");
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      o.help = true;
    } else if (arg == "-m" || arg == "--model") {
      o.model_path = next();
      o.model_is_default = false;
    } else if (arg == "-p" || arg == "--prompt") {
      o.prompt = next();
    } else if (arg == "-n" || arg == "--n-predict") {
      o.n_predict = parse_number<int>(arg, next());
      if (o.n_predict < 1) throw Error(ErrorCode::invalid_argument, arg + " must be at least 1");
    } else if (arg == "--system") {
      o.system = next();
    } else if (arg == "--template") {
      o.template_name = next();
    } else if (arg == "--attention") {
      o.attention = next();
    } else if (arg == "--device") {
      o.device = next();
    } else if (arg == "-t" || arg == "--threads") {
      o.n_threads = parse_number<int>(arg, next());
    } else if (arg == "-c" || arg == "--ctx") {
      o.n_ctx = parse_number<int>(arg, next());
      if (o.n_ctx < 1) throw Error(ErrorCode::invalid_argument, arg + " must be at least 1");
    } else if (arg == "--temp" || arg == "--temperature") {
      o.sampling.temperature = parse_number<float>(arg, next());
    } else if (arg == "--top-k") {
      o.sampling.top_k = parse_number<int32_t>(arg, next());
    } else if (arg == "--top-p") {
      o.sampling.top_p = parse_number<float>(arg, next());
    } else if (arg == "--min-p") {
      o.sampling.min_p = parse_number<float>(arg, next());
    } else if (arg == "--repeat-penalty") {
      o.sampling.repeat_penalty = parse_number<float>(arg, next());
    } else if (arg == "--seed") {
      o.sampling.seed = parse_number<uint64_t>(arg, next());
    } else {
      throw Error(ErrorCode::invalid_argument, "unknown option '" + arg + "' (see --help)");
    }
  }
  latte::Sampler check(o.sampling);  // throws naming a field outside its range
  (void)check;
  return o;
}

}  // namespace chat
