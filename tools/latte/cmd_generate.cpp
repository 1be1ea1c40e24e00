// `latte generate`: greedy continuation of token ids.
//
//   latte generate --model m.gguf --tokens "1 2 3" -n 16 --greedy [--attention mla|standard|auto]
//
// Prints the generated ids, space-separated, on one line. The prompt is evaluated once, then each
// generated token is fed back as a single-token eval.
#include "command.hpp"
#include "token_list.hpp"

#include <latte/device.hpp>
#include <latte/error.hpp>
#include <latte/model.hpp>
#include <latte/session.hpp>

#include <algorithm>
#include <cstdio>
#include <string>

namespace {

void print_usage() {
  std::fputs(
      "usage: latte generate --model FILE.gguf --tokens \"ID ID ...\" -n N --greedy\n"
      "                      [--attention mla|standard|auto] [--device cpu] [--threads N]\n"
      "Prints N generated token ids on one line (greedy: the most likely token each step, ties to\n"
      "the lowest id).\n",
      stdout);
}

latte::Token argmax(std::span<const float> logits) {
  return static_cast<latte::Token>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int run_generate(std::span<const std::string> argv) {
  latte::cli::Args args(argv);
  if (args.flag({"--help", "-h"})) {
    print_usage();
    return 0;
  }
  const auto model_path = args.take({"--model", "-m"});
  const auto tokens_text = args.take({"--tokens", "-t"});
  const auto count_text = args.take({"-n", "--n-predict"});
  const std::string attention = args.take({"--attention"}).value_or("auto");
  const std::string device = args.take({"--device"}).value_or("cpu");
  const int threads = latte::cli::parse_int_option("--threads", args.take({"--threads"}).value_or("0"));
  const bool greedy = args.flag({"--greedy"});
  if (!args.positionals().empty())
    throw latte::Error(latte::ErrorCode::invalid_argument, "unexpected argument " + args.positionals()[0]);
  if (!model_path) throw latte::Error(latte::ErrorCode::invalid_argument, "--model is required");
  if (!tokens_text) throw latte::Error(latte::ErrorCode::invalid_argument, "--tokens is required");
  if (!greedy) {
    throw latte::Error(latte::ErrorCode::unsupported, "only greedy decoding is available here: pass --greedy");
  }
  const int n = count_text ? latte::cli::parse_int_option("-n", *count_text) : 16;
  if (n < 0) throw latte::Error(latte::ErrorCode::invalid_argument, "-n must not be negative");

  const auto prompt = latte::cli::parse_token_list(*tokens_text);
  const auto model = latte::Model::load(*model_path, {.device = latte::Device::parse(device)});
  latte::Session session(
      model, {.n_ctx = static_cast<int>(prompt.size()) + std::max(n, 1), .attention = attention, .n_threads = threads});
  session.eval(prompt);
  std::string line;
  for (int i = 0; i < n; ++i) {
    const latte::Token next = argmax(session.logits());
    if (i) line += ' ';
    line += std::to_string(next);
    if (i + 1 < n) session.eval(std::span(&next, 1));
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

const latte::cli::Registration reg{{"generate", "greedy continuation of token ids", run_generate}};

}  // namespace
