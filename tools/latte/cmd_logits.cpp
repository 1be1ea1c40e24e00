// `latte logits`: runs a model on token ids and prints the logits as JSON.
//
//   latte logits --model m.gguf --tokens "1 2 3" [--attention mla|standard|auto] [--all] [--device cpu] [--tp N]
//
// Without --all: one JSON array of n_vocab floats (the last position). With --all: an array of such
// arrays, one per position. Floats print with 9 significant digits (they round-trip).
#include "command.hpp"
#include "token_list.hpp"

#include <latte/device.hpp>
#include <latte/error.hpp>
#include <latte/model.hpp>
#include <latte/session.hpp>

#include <cstdio>
#include <string>

namespace {

void print_usage() {
  std::fputs(
      "usage: latte logits --model FILE.gguf --tokens \"ID ID ...\" [--attention mla|standard|auto] [--all]\n"
      "                    [--device cpu] [--threads N] [--tp N]\n"
      "Prints the logits of the last token as a JSON array (--all: an array per token).\n"
      "--tp N splits the model over N tensor-parallel ranks (docs/tensor-parallel.md).\n",
      stdout);
}

void print_row(std::span<const float> row) {
  std::fputc('[', stdout);
  for (size_t i = 0; i < row.size(); ++i) std::printf(i ? ",%.9g" : "%.9g", static_cast<double>(row[i]));
  std::fputc(']', stdout);
}

int run_logits(std::span<const std::string> argv) {
  latte::cli::Args args(argv);
  if (args.flag({"--help", "-h"})) {
    print_usage();
    return 0;
  }
  const auto model_path = args.take({"--model", "-m"});
  const auto tokens_text = args.take({"--tokens", "-t"});
  const std::string attention = args.take({"--attention"}).value_or("auto");
  const std::string device = args.take({"--device"}).value_or("cpu");
  const int threads = latte::cli::parse_int_option("--threads", args.take({"--threads"}).value_or("0"));
  const bool all = args.flag({"--all"});
  const int tp = latte::cli::parse_int_option("--tp", args.take({"--tp"}).value_or("1"));
  if (!args.positionals().empty())
    throw latte::Error(latte::ErrorCode::invalid_argument, "unexpected argument " + args.positionals()[0]);
  if (!model_path) throw latte::Error(latte::ErrorCode::invalid_argument, "--model is required");
  if (!tokens_text) throw latte::Error(latte::ErrorCode::invalid_argument, "--tokens is required");

  const auto tokens = latte::cli::parse_token_list(*tokens_text);
  const auto model = latte::Model::load(*model_path, {.device = latte::Device::parse(device), .tensor_parallel = tp});
  latte::Session session(
      model,
      {.n_ctx = static_cast<int>(tokens.size()), .attention = attention, .logits_all = all, .n_threads = threads});
  session.eval(tokens);
  if (all) {
    std::fputc('[', stdout);
    for (int i = 0; i < static_cast<int>(tokens.size()); ++i) {
      if (i) std::fputc(',', stdout);
      print_row(session.logits(i));
    }
    std::fputc(']', stdout);
  } else {
    print_row(session.logits());
  }
  std::fputc('\n', stdout);
  return 0;
}

const latte::cli::Registration reg{{"logits", "print a model's logits for token ids as JSON", run_logits}};

}  // namespace
