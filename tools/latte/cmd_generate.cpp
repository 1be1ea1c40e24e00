// `latte generate`: continuation of token ids, greedy or sampled.
//
//   latte generate --model m.gguf --tokens "1 2 3" -n 16 --greedy [--attention mla|standard|auto]
//   latte generate --model m.gguf --tokens "1 2 3" -n 16 --temp 0.7 --top-p 0.9 --seed 42
//
// Prints the generated ids, space-separated, on one line. The prompt is evaluated once, then each
// generated token is fed back as a single-token eval. Sampling uses latte::Sampler (the prompt is
// part of its penalty history); --greedy is temperature 0: the largest logit, ties to the lowest id.
//
// --tp-launch: this process is one rank of a model split over processes (one GPU each, on one host
// or several), started with LATTE_TP_RANK / LATTE_TP_WORLD / LATTE_TP_ID_FILE (or by mpirun): every
// rank runs the same command, only rank 0 prints (docs/tensor-parallel.md).
//
//   LATTE_TP_RANK=0 LATTE_TP_WORLD=2 LATTE_TP_ID_FILE=/shared/id latte generate --tp-launch -m m.gguf ...
#include "command.hpp"
#include "token_list.hpp"

#include "parallel/launch_environment.hpp"

#include <latte/device.hpp>
#include <latte/error.hpp>
#include <latte/model.hpp>
#include <latte/sampler.hpp>
#include <latte/session.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

void print_usage() {
  std::fputs(
      "usage: latte generate --model FILE.gguf --tokens \"ID ID ...\" -n N\n"
      "                      [--greedy | --temp T --top-k K --top-p P --min-p P --seed S]\n"
      "                      [--attention mla|standard|auto] [--device cpu] [--threads N] [--timing]\n"
      "                      [--tp N] [--tp-launch]\n"
      "Prints N generated token ids on one line. --greedy: the most likely token each step, ties to\n"
      "the lowest id; otherwise latte::Sampler with the given settings (defaults: its own).\n"
      "--timing prints prompt and generation speeds on stderr. --tp N splits the model over N ranks\n"
      "(CPU: threads; cuda:K: GPUs K..K+N-1). --tp-launch: this process is one rank of a model split\n"
      "over processes started with LATTE_TP_RANK, LATTE_TP_WORLD, LATTE_TP_ID_FILE [LATTE_TP_LOCAL_RANK]\n"
      "(or by mpirun): it runs on GPU cuda:LOCAL_RANK; every rank runs the same command, rank 0 prints.\n",
      stdout);
}

/// A sampling setting's value (latte::Sampler checks its range).
float parse_float_option(const std::string& option, const std::string& text) {
  return static_cast<float>(latte::cli::parse_double_option(option, text));
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
  const bool tp_launch = args.flag({"--tp-launch"});
  const std::string device = args.take({"--device"}).value_or(tp_launch ? "cuda" : "cpu");
  const int threads = latte::cli::parse_int_option("--threads", args.take({"--threads"}).value_or("0"));
  const bool greedy = args.flag({"--greedy"});
  const bool timing = args.flag({"--timing"});
  const int tp = latte::cli::parse_int_option("--tp", args.take({"--tp"}).value_or("1"));
  latte::SamplerParams sampling;
  if (auto v = args.take({"--temp", "--temperature"})) sampling.temperature = parse_float_option("--temp", *v);
  if (auto v = args.take({"--top-k"})) sampling.top_k = latte::cli::parse_int_option("--top-k", *v);
  if (auto v = args.take({"--top-p"})) sampling.top_p = parse_float_option("--top-p", *v);
  if (auto v = args.take({"--min-p"})) sampling.min_p = parse_float_option("--min-p", *v);
  if (auto v = args.take({"--seed"})) sampling.seed = static_cast<uint64_t>(latte::cli::parse_int_option("--seed", *v));
  if (greedy) sampling.temperature = 0.0f;
  if (!args.positionals().empty())
    throw latte::Error(latte::ErrorCode::invalid_argument, "unexpected argument " + args.positionals()[0]);
  if (!model_path) throw latte::Error(latte::ErrorCode::invalid_argument, "--model is required");
  if (!tokens_text) throw latte::Error(latte::ErrorCode::invalid_argument, "--tokens is required");
  const int n = count_text ? latte::cli::parse_int_option("-n", *count_text) : 16;
  if (n < 0) throw latte::Error(latte::ErrorCode::invalid_argument, "-n must not be negative");

  const auto prompt = latte::cli::parse_token_list(*tokens_text);
  const auto model = latte::Model::load(
      *model_path,
      {.device = latte::Device::parse(device), .tensor_parallel = tp, .tensor_parallel_from_launch = tp_launch});
  // Every rank samples the same tokens from the same logits; rank 0 alone reports them.
  const bool quiet = tp_launch && latte::detail::read_launch_environment()->rank != 0;
  const int n_ctx = latte::cli::context_positions(
      static_cast<int64_t>(prompt.size()) + std::max(n, 1),
      "the prompt (" + std::to_string(prompt.size()) + " tokens) and -n " + std::to_string(n));
  const int trained = model.config().context_length;
  if (!quiet && trained > 0 && n_ctx > trained) {
    std::fprintf(stderr, "warning: %d positions (prompt + -n) is longer than the model's trained context (%d)\n", n_ctx,
                 trained);
  }
  latte::Session session(model, {.n_ctx = n_ctx, .attention = attention, .n_threads = threads});
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  session.eval(prompt);
  const auto t1 = clock::now();
  latte::Sampler sampler(sampling);
  sampler.accept(prompt);
  std::string line;
  for (int i = 0; i < n; ++i) {
    const latte::Token next = sampler.sample(session.logits());
    if (i) line += ' ';
    line += std::to_string(next);
    if (i + 1 < n) session.eval(std::span(&next, 1));
  }
  const auto t2 = clock::now();
  if (quiet) return 0;
  std::printf("%s\n", line.c_str());
  if (timing) {
    const double prompt_s = std::chrono::duration<double>(t1 - t0).count();
    const double gen_s = std::chrono::duration<double>(t2 - t1).count();
    std::fprintf(stderr,
                 "prompt: %zu tokens in %.3f s (%.1f tokens/s); generation: %d tokens in %.3f s (%.1f tokens/s)\n",
                 prompt.size(), prompt_s, static_cast<double>(prompt.size()) / prompt_s, std::max(n - 1, 0), gen_s,
                 n > 1 ? (n - 1) / gen_s : 0.0);
  }
  return 0;
}

const latte::cli::Registration reg{{"generate", "continue token ids (greedy or sampled)", run_generate}};

}  // namespace
