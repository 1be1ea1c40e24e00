// Session: validation of eval() input, the KV cache, and the forward pass over prompt chunks.
#include "cpu/thread_pool.hpp"
#include "model/architecture.hpp"
#include "model/forward.hpp"
#include "model/model_state.hpp"
#include "session/kv_cache.hpp"

#include <latte/attention.hpp>
#include <latte/error.hpp>
#include <latte/session.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <numeric>

namespace latte {

namespace {
/// Prompt tokens per forward call: bounds activation scratch (attention scores grow with it).
constexpr int kPrefillChunk = 256;
}  // namespace

struct Session::Impl {
  Impl(Model m, SessionParams p)
      : model(std::move(m)),
        params(std::move(p)),
        pool(params.n_threads),
        runner(pool.runner()),
        backend_name(resolve_attention_backend(params.attention, model.config(), model.device())),
        backend(AttentionRegistry::instance().create(backend_name, model.config(), model.device())),
        cache(model.config().n_layer_main(), backend->kv_layout(),
              model.config().has_indexer() ? model.config().indexer.head_dim : 0, params.n_ctx) {
    const detail::ModelState& state = model.state();
    backend->prepare(state.weights.attention_weights());
    forward = detail::architecture_ops(state.config.arch).create_cpu_forward(state, *backend, runner);
  }

  Model model;
  SessionParams params;
  cpu::ThreadPool pool;
  TaskRunner runner;
  std::string backend_name;
  std::unique_ptr<AttentionBackend> backend;
  detail::KvCache cache;
  std::unique_ptr<detail::ForwardPass> forward;
  std::vector<float> logits;  // [n_logit_rows, n_vocab]
  int n_last = 0;             // tokens of the last eval
  bool have_all_logits = false;
  std::atomic<bool> in_use{false};  // set while a call that changes the session runs
};

namespace {
/// Marks a session busy for the duration of a call that changes it. A Session is used by one thread
/// at a time; a second thread entering meanwhile gets Error(invalid_argument) instead of a data race.
/// Costs one atomic exchange per call, nothing next to a forward pass, so it is on in every build.
class ExclusiveUse {
 public:
  ExclusiveUse(std::atomic<bool>& flag, const char* call) : flag_(flag) {
    if (flag_.exchange(true, std::memory_order_acquire)) throw_in_use(call);
  }
  ~ExclusiveUse() { flag_.store(false, std::memory_order_release); }
  ExclusiveUse(const ExclusiveUse&) = delete;
  ExclusiveUse& operator=(const ExclusiveUse&) = delete;

  [[noreturn]] static void throw_in_use(const char* call) {
    throw Error(ErrorCode::invalid_argument, std::string(call) +
                                                 ": the session is in use by another thread (a Session must "
                                                 "not be used from two threads at once; give each its own)");
  }

 private:
  std::atomic<bool>& flag_;
};

SessionParams checked(SessionParams p) {
  if (p.n_ctx < 1)
    throw Error(ErrorCode::invalid_argument, "n_ctx must be at least 1 (got " + std::to_string(p.n_ctx) + ")");
  if (p.n_threads < 0) {
    throw Error(ErrorCode::invalid_argument,
                "n_threads must not be negative (got " + std::to_string(p.n_threads) + ")");
  }
  return p;
}
}  // namespace

Session::Session(Model model, SessionParams params)
    : impl_(std::make_unique<Impl>(std::move(model), checked(std::move(params)))) {}
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

void Session::eval(std::span<const Token> tokens) {
  Impl& s = *impl_;
  const ExclusiveUse exclusive(s.in_use, "eval");
  const int n_vocab = s.model.config().n_vocab;
  if (tokens.empty()) throw Error(ErrorCode::invalid_argument, "eval: no tokens");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= n_vocab) {
      throw Error(ErrorCode::invalid_argument, "eval: token id " + std::to_string(tokens[i]) + " at index " +
                                                   std::to_string(i) + " is outside the vocabulary [0, " +
                                                   std::to_string(n_vocab) + ")");
    }
  }
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
    for (int start = 0; start < n; start += kPrefillChunk) {
      const int len = std::min(kPrefillChunk, n - start);
      rows.clear();
      if (all) {
        rows.resize(static_cast<size_t>(len));
        std::iota(rows.begin(), rows.end(), 0);
      } else if (start + len == n) {
        rows.push_back(len - 1);
      }
      const detail::BatchSequence seq{.cache = &s.cache, .first_row = 0, .n_tokens = len};
      s.forward->run({.tokens = tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(len)),
                      .sequences = std::span(&seq, 1),
                      .logit_rows = rows,
                      .logits = s.logits.data() + (all ? static_cast<size_t>(start) * n_vocab : 0)});
    }
  } catch (...) {
    s.cache.set_n_tokens(n_past);  // a failed eval leaves the cached tokens as they were
    s.n_last = 0;
    throw;
  }
  s.n_last = n;
  s.have_all_logits = all;
}

std::span<const float> Session::logits() const {
  if (impl_->n_last == 0) throw Error(ErrorCode::invalid_argument, "logits: no eval has run yet");
  return logits(impl_->n_last - 1);
}

std::span<const float> Session::logits(int i) const {
  const Impl& s = *impl_;
  if (s.in_use.load(std::memory_order_acquire)) ExclusiveUse::throw_in_use("logits");
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
  const ExclusiveUse exclusive(impl_->in_use, "reset");
  impl_->cache.set_n_tokens(0);
  impl_->n_last = 0;
}

void Session::truncate(int n) {
  const ExclusiveUse exclusive(impl_->in_use, "truncate");
  if (n < 0 || n > impl_->cache.n_tokens()) {
    throw Error(ErrorCode::invalid_argument, "truncate(" + std::to_string(n) + "): the session holds " +
                                                 std::to_string(impl_->cache.n_tokens()) + " tokens");
  }
  impl_->cache.set_n_tokens(n);
  impl_->n_last = 0;
}

const std::string& Session::backend_name() const noexcept { return impl_->backend_name; }
const Model& Session::model() const noexcept { return impl_->model; }

}  // namespace latte
