// Perplexity over fixed windows (the protocol is documented in include/latte/perplexity.hpp).
#include <latte/error.hpp>
#include <latte/perplexity.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace latte {

PerplexityResult perplexity(const Model& model, std::span<const Token> tokens, const PerplexityParams& params) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2) throw Error(ErrorCode::invalid_argument, "perplexity: needs at least 2 tokens, got " + std::to_string(n));
  if (params.n_ctx < 2) {
    throw Error(ErrorCode::invalid_argument,
                "perplexity: n_ctx must be at least 2 (got " + std::to_string(params.n_ctx) + ")");
  }
  const int stride = params.stride == 0 ? params.n_ctx : params.stride;
  if (stride < 1 || stride > params.n_ctx) {
    throw Error(ErrorCode::invalid_argument, "perplexity: stride " + std::to_string(params.stride) +
                                                 " is outside [1, n_ctx = " + std::to_string(params.n_ctx) + "]");
  }
  SessionParams sp = params.session;
  sp.n_ctx = params.n_ctx;
  sp.logits_all = true;
  Session session(model, sp);

  PerplexityResult r;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t scored_end = 1;  // tokens [1, scored_end) are scored
  for (int64_t start = 0; scored_end < n; start += stride) {
    const int64_t end = std::min(n, start + params.n_ctx);
    if (end <= scored_end) continue;  // cannot happen with stride <= n_ctx; kept for clarity
    session.reset();
    session.eval(tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(end - start)));
    r.n_evaluated += end - start;
    ++r.n_windows;
    for (int64_t j = std::max(scored_end, start + 1); j < end; ++j) {
      const std::span<const float> logits = session.logits(static_cast<int>(j - 1 - start));
      const float max = *std::max_element(logits.begin(), logits.end());
      double sum = 0;
      for (float v : logits) sum += std::exp(static_cast<double>(v) - max);
      const double log_p =
          static_cast<double>(logits[static_cast<size_t>(tokens[static_cast<size_t>(j)])]) - max - std::log(sum);
      r.nll.push_back(-log_p);
    }
    scored_end = end;
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
