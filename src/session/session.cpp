// Session: validation of eval() input, the KV cache, the forward pass over prompt chunks, the token
// history with prefix reuse, and fork. Saving and loading the state is in session_state.cpp.
#include "session/session_impl.hpp"

#include "core/task_pool.hpp"

#include <latte/attention.hpp>
#include <latte/batch.hpp>
#include <latte/error.hpp>
#include <latte/session.hpp>

#ifdef LATTE_WITH_CUDA
#include "cuda/cuda_forward.hpp"
#endif

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <unordered_set>

namespace latte {

namespace {
/// Prompt tokens per forward call: bounds activation scratch (CPU attention scores grow with it). A GPU
/// takes longer chunks: its flash attention keeps no score matrix, and every chunk re-reads all routed
/// experts' weights, so fewer, longer chunks read them fewer times.
constexpr int kPrefillChunkCpu = 256;
constexpr int kPrefillChunkGpu = 512;
int prefill_chunk(const Model& model) { return model.device().is_cpu() ? kPrefillChunkCpu : kPrefillChunkGpu; }
}  // namespace

namespace {
SessionParams checked(SessionParams p) {
  if (p.n_ctx < 1)
    throw Error(ErrorCode::invalid_argument, "n_ctx must be at least 1 (got " + std::to_string(p.n_ctx) + ")");
  require_thread_count(p.n_threads, "n_threads");
  return p;
}
}  // namespace

Session::Session(Model model, SessionParams params)
    : impl_(std::make_unique<Impl>(std::move(model), checked(std::move(params)))) {}
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

namespace {

// Throws Error(invalid_argument) for an empty span or the first id outside [0, n_vocab).
void check_tokens(std::span<const Token> tokens, int n_vocab, const char* what) {
  if (tokens.empty()) throw Error(ErrorCode::invalid_argument, std::string(what) + ": no tokens");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= n_vocab) {
      throw Error(ErrorCode::invalid_argument, std::string(what) + ": token id " + std::to_string(tokens[i]) +
                                                   " at index " + std::to_string(i) +
                                                   " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
    }
  }
}

}  // namespace

void Session::eval(std::span<const Token> tokens) {
  Impl& s = *impl_;
  const detail::ExclusiveUse exclusive(s.in_use, "eval");
  check_tokens(tokens, s.model.config().n_vocab, "eval");
  const int n_vocab = s.model.config().n_vocab;
  const int n_past = s.cache.n_tokens();
  if (static_cast<int64_t>(n_past) + static_cast<int64_t>(tokens.size()) > s.params.n_ctx) {
    throw Error(ErrorCode::context_overflow, "eval: " + std::to_string(n_past) + " cached + " +
                                                 std::to_string(tokens.size()) + " new tokens exceed n_ctx " +
                                                 std::to_string(s.params.n_ctx));
  }
  const int n = static_cast<int>(tokens.size());
  const bool all = s.params.logits_all;
  s.logits.resize(static_cast<size_t>(all ? n : 1) * n_vocab);
  std::vector<int> rows;
  try {
    const int chunk = prefill_chunk(s.model);
    for (int start = 0; start < n; start += chunk) {
      const int len = std::min(chunk, n - start);
      rows.clear();
      if (all) {
        rows.resize(static_cast<size_t>(len));
        std::iota(rows.begin(), rows.end(), 0);
      } else if (start + len == n) {
        rows.push_back(len - 1);
      }
      const detail::BatchSequence seq{.cache = &s.cache, .first_row = 0, .n_tokens = len};
      const detail::TapSink taps(s.tap_observer);
      s.forward->run({.tokens = tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(len)),
                      .sequences = std::span(&seq, 1),
                      .logit_rows = rows,
                      .logits = s.logits.data() + (all ? static_cast<size_t>(start) * n_vocab : 0),
                      .taps = s.tap_observer.on_tap ? &taps : nullptr});
    }
  } catch (...) {
    s.cache.set_n_tokens(n_past);  // a failed eval leaves the cached tokens as they were
    s.n_last = 0;
    throw;
  }
  s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
  s.n_last = n;
  s.have_all_logits = all;
}

std::span<const float> Session::logits() const {
  if (impl_->n_last == 0) throw Error(ErrorCode::invalid_argument, "logits: no eval has run yet");
  return logits(impl_->n_last - 1);
}

std::span<const float> Session::logits(int i) const {
  const Impl& s = *impl_;
  detail::ExclusiveUse::check_idle(s.in_use, "logits");
  const size_t n_vocab = static_cast<size_t>(s.model.config().n_vocab);
  if (i < 0 || i >= s.n_last) {
    throw Error(ErrorCode::invalid_argument,
                "logits(" + std::to_string(i) + "): the last eval had " + std::to_string(s.n_last) + " tokens");
  }
  if (s.have_all_logits) return {s.logits.data() + static_cast<size_t>(i) * n_vocab, n_vocab};
  if (i != s.n_last - 1) {
    throw Error(ErrorCode::invalid_argument,
                "logits(" + std::to_string(i) + "): only the last token's logits are kept (set logits_all)");
  }
  return {s.logits.data(), n_vocab};
}

int Session::n_past() const noexcept { return impl_->cache.n_tokens(); }
int Session::n_ctx() const noexcept { return impl_->params.n_ctx; }

void Session::reset() {
  const detail::ExclusiveUse exclusive(impl_->in_use, "reset");
  impl_->cache.set_n_tokens(0);
  impl_->tokens.clear();
  impl_->n_last = 0;
}

void Session::truncate(int n) {
  const detail::ExclusiveUse exclusive(impl_->in_use, "truncate");
  if (n < 0 || n > impl_->cache.n_tokens()) {
    throw Error(ErrorCode::invalid_argument, "truncate(" + std::to_string(n) + "): the session holds " +
                                                 std::to_string(impl_->cache.n_tokens()) + " tokens");
  }
  impl_->cache.set_n_tokens(n);
  impl_->tokens.resize(static_cast<size_t>(n));
  impl_->n_last = 0;
}

void Session::set_tap_observer(TapObserver observer) { impl_->tap_observer = std::move(observer); }

std::span<const Token> Session::tokens() const noexcept { return impl_->tokens; }

int Session::eval_reusing_prefix(std::span<const Token> all_tokens) {
  Impl& s = *impl_;
  detail::ExclusiveUse::check_idle(s.in_use, "eval_reusing_prefix");  // truncate and eval take the session
  check_tokens(all_tokens, s.model.config().n_vocab, "eval_reusing_prefix");
  if (all_tokens.size() > static_cast<size_t>(s.params.n_ctx)) {
    throw Error(ErrorCode::context_overflow, "eval_reusing_prefix: " + std::to_string(all_tokens.size()) +
                                                 " tokens exceed n_ctx " + std::to_string(s.params.n_ctx));
  }
  const auto [held_end, wanted_end] =
      std::mismatch(s.tokens.begin(), s.tokens.end(), all_tokens.begin(), all_tokens.end());
  size_t common = static_cast<size_t>(held_end - s.tokens.begin());
  if (common == all_tokens.size()) {
    // Everything wanted is cached already: nothing runs when its last logits are the ones held.
    if (common == s.tokens.size() && s.n_last > 0) return 0;
    common -= 1;  // otherwise the last token runs again to produce its logits
  }
  truncate(static_cast<int>(common));
  eval(all_tokens.subspan(common));
  return static_cast<int>(all_tokens.size() - common);
}

Session Session::fork() const {
  const Impl& s = *impl_;
  s.require_host_cache("fork");
  detail::ExclusiveUse::check_idle(s.in_use, "fork");
  Session copy(s.model, s.params);
  Impl& c = *copy.impl_;
  c.cache = s.cache.clone();
  c.tokens = s.tokens;
  c.logits = s.logits;
  c.n_last = s.n_last;
  c.have_all_logits = s.have_all_logits;
  return copy;
}

const std::string& Session::backend_name() const noexcept { return impl_->backend_name; }
const Model& Session::model() const noexcept { return impl_->model; }

// ---- batched evaluation (latte/batch.hpp) ----

namespace {
std::string batch_where(size_t i) { return "eval_batch: session " + std::to_string(i); }
}  // namespace

void eval_batch(std::span<Session* const> sessions, std::span<const std::span<const Token>> tokens) {
  // Validation first: nothing below may throw before the forward pass except these checks.
  if (sessions.empty()) throw Error(ErrorCode::invalid_argument, "eval_batch: no sessions");
  if (tokens.size() != sessions.size()) {
    throw Error(ErrorCode::invalid_argument, "eval_batch: " + std::to_string(sessions.size()) + " sessions but " +
                                                 std::to_string(tokens.size()) + " token lists");
  }
  std::unordered_set<const Session*> seen;
  for (size_t i = 0; i < sessions.size(); ++i) {
    const Session* s = sessions[i];
    if (s == nullptr || !s->impl_) throw Error(ErrorCode::invalid_argument, batch_where(i) + " is null");
    if (!seen.insert(s).second) throw Error(ErrorCode::invalid_argument, batch_where(i) + " appears twice");
    const Session::Impl& first = *sessions[0]->impl_;
    const Session::Impl& si = *s->impl_;
    if (&si.model.state() != &first.model.state()) {
      throw Error(ErrorCode::invalid_argument, batch_where(i) + " runs a different model than session 0");
    }
    if (si.backend_name != first.backend_name) {
      throw Error(ErrorCode::invalid_argument, batch_where(i) + " uses attention backend '" + si.backend_name +
                                                   "', session 0 uses '" + first.backend_name + "'");
    }
    const int n_vocab = si.model.config().n_vocab;
    if (tokens[i].empty()) throw Error(ErrorCode::invalid_argument, batch_where(i) + ": no tokens");
    for (size_t t = 0; t < tokens[i].size(); ++t) {
      if (tokens[i][t] < 0 || tokens[i][t] >= n_vocab) {
        throw Error(ErrorCode::invalid_argument, batch_where(i) + ": token id " + std::to_string(tokens[i][t]) +
                                                     " at index " + std::to_string(t) +
                                                     " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
      }
    }
    const int n_past = si.cache.n_tokens();
    if (static_cast<int64_t>(n_past) + static_cast<int64_t>(tokens[i].size()) > si.params.n_ctx) {
      throw Error(ErrorCode::context_overflow, batch_where(i) + ": " + std::to_string(n_past) + " cached + " +
                                                   std::to_string(tokens[i].size()) + " new tokens exceed n_ctx " +
                                                   std::to_string(si.params.n_ctx));
    }
  }

  const size_t n_seq = sessions.size();
  Session::Impl& runner = *sessions[0]->impl_;
  const size_t n_vocab = static_cast<size_t>(runner.model.config().n_vocab);
  std::vector<int> n_past(n_seq), done(n_seq, 0);
  for (size_t i = 0; i < n_seq; ++i) {
    Session::Impl& s = *sessions[i]->impl_;
    n_past[i] = s.cache.n_tokens();
    const size_t n = tokens[i].size();
    s.logits.resize((s.params.logits_all ? n : 1) * n_vocab);
  }
  std::vector<Token> step_tokens;                  // [rows] this step's ids, sequence after sequence
  std::vector<detail::BatchSequence> step_seqs;    // the sequences with rows in this step
  std::vector<int> logit_rows;                     // batch rows whose logits are wanted
  std::vector<std::pair<size_t, int>> logit_dest;  // per logit row: (session, its logits row)
  std::vector<float*> dest_rows;                   // per logit row: where the pass writes it
  const bool direct = runner.forward->writes_logit_rows();
  std::vector<float>& step_logits = runner.batch_logits;  // [logit_rows.size(), n_vocab] when not direct
  try {
    size_t next = 0;  // first session with tokens left
    while (next < n_seq) {
      step_tokens.clear();
      step_seqs.clear();
      logit_rows.clear();
      logit_dest.clear();
      int budget = prefill_chunk(sessions[next]->impl_->model);
      for (size_t i = next; i < n_seq && budget > 0; ++i) {
        Session::Impl& s = *sessions[i]->impl_;
        const int n = static_cast<int>(tokens[i].size());
        if (done[i] == n) continue;
        const int take = std::min(n - done[i], budget);
        const int first_row = static_cast<int>(step_tokens.size());
        step_seqs.push_back({.cache = &s.cache, .first_row = first_row, .n_tokens = take});
        step_tokens.insert(step_tokens.end(), tokens[i].begin() + done[i], tokens[i].begin() + done[i] + take);
        for (int t = 0; t < take; ++t) {
          const int token_index = done[i] + t;  // within tokens[i]
          if (s.params.logits_all) {
            logit_rows.push_back(first_row + t);
            logit_dest.emplace_back(i, token_index);
          } else if (token_index == n - 1) {
            logit_rows.push_back(first_row + t);
            logit_dest.emplace_back(i, 0);
          }
        }
        done[i] += take;
        budget -= take;
      }
      auto dest = [&](size_t r) {
        const auto [i, row] = logit_dest[r];
        return sessions[i]->impl_->logits.data() + static_cast<size_t>(row) * n_vocab;
      };
      if (direct) {  // each row straight into its session: no step-sized buffer, one copy
        dest_rows.resize(logit_dest.size());
        for (size_t r = 0; r < logit_dest.size(); ++r) dest_rows[r] = dest(r);
        runner.forward->run(
            {.tokens = step_tokens, .sequences = step_seqs, .logit_rows = logit_rows, .logit_dest = dest_rows});
      } else {
        step_logits.resize(logit_rows.size() * n_vocab);
        runner.forward->run(
            {.tokens = step_tokens, .sequences = step_seqs, .logit_rows = logit_rows, .logits = step_logits.data()});
        for (size_t r = 0; r < logit_dest.size(); ++r) {
          std::memcpy(dest(r), step_logits.data() + r * n_vocab, n_vocab * sizeof(float));
        }
      }
      while (next < n_seq && done[next] == static_cast<int>(tokens[next].size())) ++next;
    }
  } catch (...) {
    for (size_t i = 0; i < n_seq; ++i) {
      sessions[i]->impl_->cache.set_n_tokens(n_past[i]);  // as a failed eval: the cache is as it was
      sessions[i]->impl_->n_last = 0;
    }
    throw;
  }
  for (size_t i = 0; i < n_seq; ++i) {
    Session::Impl& s = *sessions[i]->impl_;
    s.tokens.insert(s.tokens.end(), tokens[i].begin(), tokens[i].end());  // the history follows the cache
    s.n_last = static_cast<int>(tokens[i].size());
    s.have_all_logits = s.params.logits_all;
  }
}

void decode_batch(std::span<Session* const> sessions, std::span<const Token> tokens) {
  std::vector<std::span<const Token>> lists;
  lists.reserve(tokens.size());
  for (const Token& t : tokens) lists.emplace_back(&t, 1);
  eval_batch(sessions, lists);
}

}  // namespace latte
