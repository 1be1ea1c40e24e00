// Perplexity over fixed windows (the protocol is documented in include/latte/perplexity.hpp).
#include <latte/error.hpp>
#include <latte/perplexity.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

namespace latte {

namespace {

// -log softmax(logits)[token], in double.
double token_nll(std::span<const float> logits, Token token) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max);
  return -(static_cast<double>(logits[static_cast<size_t>(token)]) - max - std::log(sum));
}

void check_params(int64_t n, const PerplexityParams& params) {
  const auto refuse = [](const std::string& why) { throw Error(ErrorCode::invalid_argument, "perplexity: " + why); };
  const bool halves = params.scoring == PerplexityScoring::second_half;
  const int min_ctx = halves ? 3 : 2;
  if (params.n_ctx < min_ctx) {
    refuse("n_ctx must be at least " + std::to_string(min_ctx) + " (got " + std::to_string(params.n_ctx) + ")");
  }
  const int64_t min_tokens = halves ? params.n_ctx : 2;
  if (n < min_tokens) {
    refuse("needs at least " + std::to_string(min_tokens) + " tokens" + (halves ? " (one whole window)" : "") +
           ", got " + std::to_string(n));
  }
  const int stride = params.stride == 0 ? params.n_ctx : params.stride;
  if (stride < 1 || stride > params.n_ctx) {
    refuse("stride " + std::to_string(params.stride) + " is outside [1, n_ctx = " + std::to_string(params.n_ctx) + "]");
  }
  if (halves && stride != params.n_ctx) {
    refuse("second-half scoring takes disjoint windows: stride " + std::to_string(params.stride) +
           " is not n_ctx = " + std::to_string(params.n_ctx));
  }
  if (params.window_bos && !halves) refuse("window_bos applies to second-half scoring only");
}

}  // namespace

PerplexityResult perplexity(const Model& model, std::span<const Token> tokens, const PerplexityParams& params) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  check_params(n, params);
  const int stride = params.stride == 0 ? params.n_ctx : params.stride;
  SessionParams sp = params.session;
  sp.n_ctx = params.n_ctx;
  sp.logits_all = true;
  Session session(model, sp);

  PerplexityResult r;
  const auto t0 = std::chrono::steady_clock::now();
  if (params.scoring == PerplexityScoring::second_half) {
    const int64_t first = params.n_ctx / 2;  // logits of positions first .. n_ctx - 2 score the next token
    std::vector<Token> window(static_cast<size_t>(params.n_ctx));
    for (int64_t start = 0; start + params.n_ctx <= n; start += params.n_ctx) {
      std::copy_n(tokens.begin() + start, params.n_ctx, window.begin());
      if (params.window_bos) window[0] = *params.window_bos;
      session.reset();
      session.eval(window);
      r.n_evaluated += params.n_ctx;
      ++r.n_windows;
      for (int64_t j = first; j + 1 < params.n_ctx; ++j) {
        r.nll.push_back(token_nll(session.logits(static_cast<int>(j)), window[static_cast<size_t>(j + 1)]));
      }
    }
  } else {
    int64_t scored_end = 1;  // tokens [1, scored_end) are scored
    for (int64_t start = 0; scored_end < n; start += stride) {
      const int64_t end = std::min(n, start + params.n_ctx);
      if (end <= scored_end) continue;  // cannot happen with stride <= n_ctx; kept for clarity
      session.reset();
      session.eval(tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(end - start)));
      r.n_evaluated += end - start;
      ++r.n_windows;
      for (int64_t j = std::max(scored_end, start + 1); j < end; ++j) {
        r.nll.push_back(token_nll(session.logits(static_cast<int>(j - 1 - start)), tokens[static_cast<size_t>(j)]));
      }
      scored_end = end;
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.n_scored = static_cast<int64_t>(r.nll.size());
  double sum = 0;
  for (double v : r.nll) sum += v;
  r.mean_nll = sum / static_cast<double>(r.n_scored);
  double sq = 0;
  for (double v : r.nll) sq += (v - r.mean_nll) * (v - r.mean_nll);
  r.nll_stderr =
      r.n_scored > 1 ? std::sqrt(sq / static_cast<double>(r.n_scored - 1) / static_cast<double>(r.n_scored)) : 0.0;
  r.perplexity = std::exp(r.mean_nll);
  return r;
}

}  // namespace latte
