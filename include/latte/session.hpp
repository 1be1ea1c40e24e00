// Session: one conversation's state (KV cache, position) over a shared Model; eval() runs the
// forward pass for new tokens (a whole prompt or one decoded token: the same code path).
//
//   latte::Session s(model, {.n_ctx = 8192, .attention = "auto"});
//   s.eval(prompt_ids); std::span<const float> next = s.logits();
#pragma once

#include <latte/model.hpp>
#include <latte/token.hpp>

#include <memory>
#include <span>
#include <string>

namespace latte {

/// How to run a session.
struct SessionParams {
  int n_ctx = 4096;                ///< most tokens the session can hold (cache grows up to this, tokens)
  std::string attention = "auto";  ///< "mla", "standard", "auto" or a host-registered backend name
  bool logits_all = false;         ///< keep the logits of every token of the last eval, not only the last
  int n_threads = 0;               ///< CPU threads (0 = std::thread::hardware_concurrency())
};

/// The state of one sequence over a Model: the KV cache of every layer (and, for glm-dsa, the
/// indexer keys), the number of tokens seen and the logits of the last eval. Holds a Model copy,
/// so the model outlives the session (destroying the Model first is safe).
/// Threads: one Session is used by one thread at a time. A call to eval, reset, truncate or logits
/// made while another thread is inside eval, reset or truncate of the same Session throws
/// Error(invalid_argument) (checked in every build, not a guarantee to rely on: it catches overlaps
/// that happen, not every missing synchronisation). Several Sessions on one Model may run on several
/// threads at once.
class Session {
 public:
  /// Creates an empty session. Throws Error(invalid_argument) for n_ctx < 1 or n_threads < 0,
  /// Error(not_found) for an unknown backend name (listing the available ones).
  explicit Session(Model model, SessionParams params = {});
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  /// Runs the model on `tokens` (appended after the n_past() tokens already seen) and keeps the
  /// logits. A prompt and a single decoded token take the same path. Before anything runs: throws
  /// Error(invalid_argument) naming the first id outside [0, n_vocab) or for an empty span, and
  /// Error(context_overflow) when n_past() + tokens.size() > n_ctx; the session is then unchanged.
  void eval(std::span<const Token> tokens);

  /// Logits (n_vocab floats) of the last token of the last eval. Throws Error(invalid_argument)
  /// before the first eval.
  [[nodiscard]] std::span<const float> logits() const;
  /// Logits of token `i` of the last eval (0 <= i < its length). Needs logits_all unless `i` is
  /// the last token; throws Error(invalid_argument) otherwise.
  [[nodiscard]] std::span<const float> logits(int i) const;

  /// Tokens held in the cache.
  [[nodiscard]] int n_past() const noexcept;
  /// The session's capacity in tokens.
  [[nodiscard]] int n_ctx() const noexcept;
  /// Forgets every token (the cache memory is kept for reuse).
  void reset();
  /// Keeps only the first `n` tokens (0 <= n <= n_past()); the next eval continues from there.
  /// Throws Error(invalid_argument) for n outside that range.
  void truncate(int n);
  /// The attention backend in use ("mla", "standard", ...), after resolving "auto".
  [[nodiscard]] const std::string& backend_name() const noexcept;
  /// The model this session runs.
  [[nodiscard]] const Model& model() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace latte
