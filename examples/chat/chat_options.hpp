// latte-chat's command line: model, device, attention backend, sampling and mode flags.
//
//   ChatOptions opt = parse_chat_options(argc, argv);   // throws latte::Error on a bad flag
#pragma once

#include <latte/sampler.hpp>

#include <optional>
#include <string>

namespace chat {

struct ChatOptions {
  std::string model_path;             ///< --model (default: the model shipped with latte)
  bool model_is_default = true;       ///< no --model given
  std::string device = "cpu";         ///< --device cpu | cuda:N
  std::string attention = "auto";     ///< --attention mla | standard | auto
  int n_threads = 0;                  ///< --threads (0: all cores)
  int n_ctx = 0;                      ///< --ctx tokens (0: the model's context, at most 4096)
  int n_predict = 256;                ///< -n: most tokens per reply
  std::optional<std::string> prompt;  ///< -p: answer this one prompt and exit
  std::string system;                 ///< --system: the system message
  std::string template_name;          ///< --template: override the GGUF's chat template
  latte::SamplerParams sampling{};    ///< --temp --top-k --top-p --min-p --repeat-penalty --seed
  bool help = false;                  ///< --help
};

/// The usage text.
const char* chat_usage();

/// Parses argv (argv[0] is the program). Throws latte::Error(invalid_argument) naming a bad or
/// unknown flag or a value that is not a number.
ChatOptions parse_chat_options(int argc, char** argv, const std::string& default_model);

}  // namespace chat
