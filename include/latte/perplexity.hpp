// Perplexity of a model over a token sequence, in fixed windows.
//
//   auto ids = model.tokenizer().encode(text, {.add_special = false});  ids.insert(ids.begin(), *bos);
//   latte::PerplexityResult r = latte::perplexity(model, ids, {.n_ctx = 256});  // r.perplexity
//
// Protocol: the sequence is cut into windows of n_ctx tokens starting every `stride` tokens
// (stride = n_ctx: disjoint windows); each window is evaluated in a fresh session. Token j is scored
// by -log softmax(logits of token j-1)[token j], with both inside the window, so a window scores from
// its 2nd token on; with stride < n_ctx, a window scores only the tokens that no earlier window
// scored (later windows give them more context). The last window ends at the last token.
//
// PerplexityScoring::second_half is llama.cpp's llama-perplexity protocol, for figures comparable with its
// output on the same GGUF and text: disjoint windows of n_ctx tokens (only whole ones: a shorter tail is not
// evaluated), the first token of each replaced by `window_bos` where set (llama-perplexity puts the BOS there),
// and only the tokens at window positions n_ctx/2 + 1 .. n_ctx - 1 scored, each with at least n_ctx/2 tokens
// of context. The caller's tokens are what llama-perplexity tokenizes: the BOS, then the text.
#pragma once

#include <latte/model.hpp>
#include <latte/session.hpp>
#include <latte/token.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace latte {

/// Which tokens of a window are scored (see above).
enum class PerplexityScoring {
  from_second,  ///< every window from its 2nd token, no token twice (windows every `stride` tokens)
  second_half,  ///< llama-perplexity's: disjoint whole windows, positions n_ctx/2 + 1 .. n_ctx - 1
};

/// How to cut the sequence.
struct PerplexityParams {
  int n_ctx = 256;          ///< tokens per window (>= 2; second_half: >= 3)
  int stride = 0;           ///< tokens between window starts (1 <= stride <= n_ctx); 0 means n_ctx
  SessionParams session{};  ///< attention backend and threads (n_ctx and logits_all are set here)
  PerplexityScoring scoring = PerplexityScoring::from_second;
  std::optional<Token> window_bos{};  ///< second_half: evaluated in place of each window's first token
};

/// The scores of a sequence.
struct PerplexityResult {
  double perplexity = 0;    ///< exp(mean_nll)
  double mean_nll = 0;      ///< mean negative log-likelihood per scored token (nats)
  double nll_stderr = 0;    ///< standard error of mean_nll: sample standard deviation / sqrt(n)
  int64_t n_scored = 0;     ///< tokens scored
  int64_t n_evaluated = 0;  ///< tokens run through the model (windows overlap when stride < n_ctx)
  int n_windows = 0;
  double seconds = 0;         ///< wall time of the evaluation
  std::vector<double> nll{};  ///< per scored token, in sequence order (from_second: token 1, 2, ... of the input)
};

/// Scores `tokens` (at least 2; second_half: at least n_ctx) with `model`. Throws Error(invalid_argument) for
/// fewer tokens, n_ctx < 2 (second_half: < 3), a stride outside [1, n_ctx] (second_half: other than n_ctx), a
/// window_bos without second_half, and whatever Session throws (bad ids, backend names).
PerplexityResult perplexity(const Model& model, std::span<const Token> tokens, const PerplexityParams& params);

}  // namespace latte
