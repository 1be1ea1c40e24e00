// `latte perplexity`: per-token negative log-likelihood of a text under a model.
//
//   latte perplexity --model m.gguf --file heldout.txt [--attention mla|standard|auto] [--ctx 256]
//                    [--stride N] [--threads N] [--max-tokens N] [--score from-second|second-half]
//
// Tokens: BOS (when the vocabulary has one) + encode(text) without other special tokens; then the
// windows of include/latte/perplexity.hpp: --ctx tokens each, starting every --stride tokens
// (default --ctx: disjoint), each scored from its 2nd token, no token scored twice. --score second-half
// is llama-perplexity's protocol (its figures for the same GGUF, text and --ctx / -c): disjoint whole
// windows, each starting with BOS, their second halves scored.
#include "command.hpp"
#include "token_list.hpp"

#include <latte/error.hpp>
#include <latte/model.hpp>
#include <latte/perplexity.hpp>
#include <latte/tokenizer.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace {

void print_usage() {
  std::fputs(
      "usage: latte perplexity --model FILE.gguf --file TEXT [--attention mla|standard|auto] [--ctx N]\n"
      "                        [--stride N] [--threads N] [--max-tokens N] [--score from-second|second-half]\n"
      "Scores BOS + the text's tokens in windows of --ctx tokens (default 256) starting every --stride\n"
      "tokens (default --ctx); each window is scored from its 2nd token and no token is scored twice.\n"
      "--score second-half follows llama.cpp's llama-perplexity instead: disjoint windows of --ctx tokens\n"
      "(a shorter tail is left out), the first token of each evaluated as BOS, and only the tokens after\n"
      "its first half scored, so its figures compare with llama-perplexity's at the same context size.\n"
      "Prints the perplexity, the mean negative log-likelihood (nats) with its standard error, the\n"
      "number of scored tokens and the evaluation speed. --max-tokens N keeps only the first N tokens\n"
      "(BOS included) of the sequence.\n",
      stdout);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw latte::Error(latte::ErrorCode::not_found, path + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int run_perplexity(std::span<const std::string> argv) {
  latte::cli::Args args(argv);
  if (args.flag({"--help", "-h"})) {
    print_usage();
    return 0;
  }
  const auto model_path = args.take({"--model", "-m"});
  const auto file = args.take({"--file", "-f"});
  const std::string attention = args.take({"--attention"}).value_or("auto");
  const int ctx = latte::cli::parse_int_option("--ctx", args.take({"--ctx"}).value_or("256"));
  const int stride = latte::cli::parse_int_option("--stride", args.take({"--stride"}).value_or("0"));
  const int threads = latte::cli::parse_int_option("--threads", args.take({"--threads"}).value_or("0"));
  const int max_tokens = latte::cli::parse_int_option("--max-tokens", args.take({"--max-tokens"}).value_or("0"));
  const std::string score = args.take({"--score"}).value_or("from-second");
  if (score != "from-second" && score != "second-half") {
    throw latte::Error(latte::ErrorCode::invalid_argument,
                       "--score must be from-second or second-half, got '" + score + "'");
  }
  if (max_tokens < 0) throw latte::Error(latte::ErrorCode::invalid_argument, "--max-tokens must be >= 0");
  if (!args.positionals().empty())
    throw latte::Error(latte::ErrorCode::invalid_argument, "unexpected argument " + args.positionals()[0]);
  if (!model_path) throw latte::Error(latte::ErrorCode::invalid_argument, "--model is required");
  if (!file) throw latte::Error(latte::ErrorCode::invalid_argument, "--file is required");

  const latte::Model model = latte::Model::load(*model_path);
  const latte::Tokenizer& tokenizer = model.tokenizer();
  const std::vector<latte::Token> text_tokens =
      tokenizer.encode(read_text(*file), {.add_special = false, .parse_special = false});
  std::vector<latte::Token> tokens(text_tokens.size() + (tokenizer.bos() ? 1 : 0));
  if (const auto bos = tokenizer.bos()) tokens[0] = *bos;
  std::copy(text_tokens.begin(), text_tokens.end(), tokens.end() - static_cast<std::ptrdiff_t>(text_tokens.size()));
  if (max_tokens > 0 && tokens.size() > static_cast<size_t>(max_tokens)) tokens.resize(static_cast<size_t>(max_tokens));

  latte::PerplexityParams params;
  params.n_ctx = ctx;
  params.stride = stride;
  params.session.attention = attention;
  params.session.n_threads = threads;
  if (score == "second-half") {
    params.scoring = latte::PerplexityScoring::second_half;
    params.window_bos = tokenizer.bos();
  }
  const latte::PerplexityResult r = latte::perplexity(model, tokens, params);
  std::printf("ppl %.4f  mean nll %.5f +- %.5f  tokens %lld scored of %zu  windows %d  %.1f t/s\n", r.perplexity,
              r.mean_nll, r.nll_stderr, static_cast<long long>(r.n_scored), tokens.size(), r.n_windows,
              r.seconds > 0 ? static_cast<double>(r.n_evaluated) / r.seconds : 0.0);
  return 0;
}

const latte::cli::Registration reg{{"perplexity", "per-token negative log-likelihood of a text", run_perplexity}};

}  // namespace
