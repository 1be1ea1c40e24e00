// Session: one conversation's state (KV cache, token history, position) over a shared Model; eval()
// runs the forward pass for new tokens (a whole prompt or one decoded token: the same code path).
// eval_reusing_prefix() serves multi-turn chat, fork() copies a conversation, save_state() /
// load_state() keep it in a file (format: docs/session-state.md).
//
//   latte::Session s(model, {.n_ctx = 8192, .attention = "auto"});
//   s.eval(prompt_ids); std::span<const float> next = s.logits(); s.save_state("chat.latte");
#pragma once

#include <latte/diagnostics.hpp>
#include <latte/model.hpp>
#include <latte/token.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace latte {

class Session;
/// Runs several sessions' new tokens in one forward pass per step; documented in latte/batch.hpp.
void eval_batch(std::span<Session* const> sessions, std::span<const std::span<const Token>> tokens);

/// Most CPU threads a session (SessionParams::n_threads) or any other latte thread pool may start.
inline constexpr int max_threads = 1024;

/// How to run a session.
struct SessionParams {
  int n_ctx = 4096;                ///< most tokens the session can hold (cache grows up to this, tokens)
  std::string attention = "auto";  ///< "mla", "standard", "auto" or a host-registered backend name
  bool logits_all = false;         ///< keep the logits of every token of the last eval, not only the last
  int n_threads = 0;               ///< CPU threads, 0..max_threads (0 = std::thread::hardware_concurrency())
};

/// The state of one sequence over a Model: the KV cache of every layer (and, for glm-dsa, the
/// indexer keys), the number of tokens seen and the logits of the last eval. Holds a Model copy,
/// so the model outlives the session (destroying the Model first is safe).
/// Threads: one Session is used by one thread at a time. A call (eval, eval_reusing_prefix, reset,
/// truncate, load_state, logits, fork, save_state) made while another thread is inside eval, reset,
/// truncate or load_state of the same Session throws Error(invalid_argument) (checked in every build,
/// not a guarantee to rely on: it catches overlaps that happen, not every missing synchronisation).
/// Several Sessions on one Model may run on several threads at once.
/// A model split over processes (ModelParams::tensor_parallel_from_launch) is SPMD: every process
/// must make the same Session calls with the same tokens in the same order (each step's collectives
/// need every rank); every process then gets the same logits bit for bit.
class Session {
 public:
  /// Creates an empty session. Throws Error(invalid_argument) for n_ctx < 1 or n_threads outside [0, max_threads],
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
  /// The ids of the tokens held in the cache, in order (n_past() of them).
  [[nodiscard]] std::span<const Token> tokens() const noexcept;
  /// The session's capacity in tokens.
  [[nodiscard]] int n_ctx() const noexcept;
  /// Forgets every token (the cache memory is kept for reuse).
  void reset();
  /// Keeps only the first `n` tokens (0 <= n <= n_past()); the next eval continues from there.
  /// Throws Error(invalid_argument) for n outside that range.
  void truncate(int n);

  /// Makes the session hold exactly `all_tokens` while running as little as possible: keeps the
  /// longest common prefix of tokens() and `all_tokens`, drops the rest and evaluates only the new
  /// tail; returns how many tokens were evaluated. For multi-turn chat: render the whole
  /// conversation, tokenize it, call this. Afterwards logits() are those of the last of
  /// `all_tokens`: when `all_tokens` equals tokens() and the last eval's logits are still held,
  /// nothing runs (0); when it is a shorter prefix, its last token runs again (1). With logits_all,
  /// logits(i) index the evaluated tail. Throws like eval (empty span, an id out of range,
  /// Error(context_overflow) when all_tokens.size() > n_ctx) before anything changes.
  int eval_reusing_prefix(std::span<const Token> all_tokens);

  /// An independent copy of the conversation: the same model, parameters, tokens, cache and logits.
  /// Either session can then continue without affecting the other.
  [[nodiscard]] Session fork() const;

  /// Writes the whole state (tokens, cache rows, last logits) to `path`, with the model's
  /// fingerprint, the backend and its cache layout, and checksums (docs/session-state.md).
  /// `host_data` is stored alongside, unchanged (e.g. an application's chat messages). The file is
  /// written to `path`.tmp and then renamed, so an existing file is replaced only by a complete one.
  /// Throws Error(io) naming the path when it cannot be written.
  void save_state(const std::string& path, std::string_view host_data = {}) const;
  /// The bytes save_state would write.
  [[nodiscard]] std::vector<std::byte> save_state_to_memory(std::string_view host_data = {}) const;
  /// Replaces this session's state with the one saved in `path` and returns its host data. The
  /// state must come from the same model (fingerprint) and a backend of the same name and cache
  /// layout, and fit in n_ctx. Throws Error(not_found) / Error(io) when the file cannot be read,
  /// Error(invalid_file) naming the path and the problem (not a state file, an unknown format
  /// version, another model, another backend or layout, a truncated file, a checksum mismatch, an
  /// impossible length), Error(context_overflow) when it holds more than n_ctx tokens. On any
  /// failure the session is unchanged.
  std::string load_state(const std::string& path);
  /// load_state from bytes in memory (`name` is used in error messages).
  std::string load_state_from_memory(std::span<const std::byte> bytes, const std::string& name = "<memory>");

  /// The attention backend in use ("mla", "standard", ...), after resolving "auto".
  [[nodiscard]] const std::string& backend_name() const noexcept;
  /// Observes the activation taps of every later eval (include/latte/diagnostics.hpp lists them);
  /// an observer with an empty on_tap removes it. Observing does not change any result.
  void set_tap_observer(TapObserver observer);
  /// The model this session runs.
  [[nodiscard]] const Model& model() const noexcept;

 private:
  friend void eval_batch(std::span<Session* const> sessions, std::span<const std::span<const Token>> tokens);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace latte
