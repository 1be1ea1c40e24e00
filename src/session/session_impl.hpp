// The state behind latte::Session, shared by session.cpp (eval, truncate, fork) and
// session_state.cpp (save_state / load_state).
#pragma once

#include "cpu/thread_pool.hpp"
#include "model/architecture.hpp"
#include "model/forward.hpp"
#include "model/model_state.hpp"
#include "parallel/tensor_parallel_forward.hpp"
#include "session/kv_cache.hpp"

#ifdef LATTE_WITH_CUDA
#include "cuda/cuda_forward.hpp"
#include "cuda/tensor_parallel_cuda.hpp"
#endif

#include <latte/attention.hpp>
#include <latte/diagnostics.hpp>
#include <latte/error.hpp>
#include <latte/session.hpp>
#include <latte/token.hpp>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

namespace latte {

struct Session::Impl {
  Impl(Model m, SessionParams p)
      : model(std::move(m)),
        params(std::move(p)),
        pool(params.n_threads),
        runner(pool.runner()),
        backend_name(resolve_attention_backend(params.attention, model.config(), model.device())),
        backend(AttentionRegistry::instance().create(backend_name, model.config(), model.device())),
        cache(model.config().n_layer_main(), tensor_parallel() ? KvLayout{.values_per_token = 1} : backend->kv_layout(),
              model.config().has_indexer() && !tensor_parallel() ? model.config().indexer.head_dim : 0, params.n_ctx) {
    const detail::ModelState& state = model.state();
    if (tensor_parallel()) {
      // Each rank runs its own backend and cache over its shard; `cache` only counts tokens.
#ifdef LATTE_WITH_CUDA
      if (model.device().is_cuda()) {
        forward = cuda::create_tensor_parallel_cuda_forward(state, backend_name);
        return;
      }
#endif
      forward = detail::create_tensor_parallel_cpu_forward(state, backend_name, pool.size());
      return;
    }
    backend->prepare(state.weights.attention_weights());
#ifdef LATTE_WITH_CUDA
    if (model.device().is_cuda()) {
      forward = cuda::create_cuda_forward(state, *backend);
      return;
    }
#endif
    forward = detail::architecture_ops(state.config.arch).create_cpu_forward(state, *backend, runner);
  }

  [[nodiscard]] bool tensor_parallel() const noexcept { return model.state().tensor_parallel != nullptr; }

  /// Saving, loading and forking copy the cache rows on the host: sessions whose rows live in device
  /// memory or in per-rank shards cannot do that yet.
  void require_host_cache(const char* what) const {
    if (model.device().is_cuda()) {
      throw Error(ErrorCode::unsupported, std::string(what) + ": the session's cache is in " +
                                              model.device().to_string() +
                                              " memory; saving, loading and forking run on CPU sessions only so far");
    }
    if (tensor_parallel()) {
      throw Error(ErrorCode::unsupported, std::string(what) +
                                              ": the session's cache is split over tensor-parallel ranks; saving, "
                                              "loading and forking run on unsplit sessions only so far");
    }
  }

  Model model;
  SessionParams params;
  cpu::ThreadPool pool;
  TaskRunner runner;
  std::string backend_name;
  std::unique_ptr<AttentionBackend> backend;
  detail::KvCache cache;
  std::unique_ptr<detail::ForwardPass> forward;
  std::vector<Token> tokens;  // [cache.n_tokens()] the ids whose rows the cache holds, in order
  std::vector<float> logits;  // [n_logit_rows, n_vocab]
  /// eval_batch's logits of one step when the pass cannot write rows into the sessions (kept between
  /// calls: a batch of 128 rows is 66 MB, freshly faulted in on every step when allocated per call).
  std::vector<float> batch_logits;
  int n_last = 0;             // tokens of the last eval (0: no logits held)
  bool have_all_logits = false;
  TapObserver tap_observer;
  std::atomic<bool> in_use{false};  // set while a call that changes the session runs
};

namespace detail {

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

  /// Throws unless no call holds the session (for calls that only read it).
  static void check_idle(const std::atomic<bool>& flag, const char* call) {
    if (flag.load(std::memory_order_acquire)) throw_in_use(call);
  }
  [[noreturn]] static void throw_in_use(const char* call) {
    throw Error(ErrorCode::invalid_argument, std::string(call) +
                                                 ": the session is in use by another thread (a Session must "
                                                 "not be used from two threads at once; give each its own)");
  }

 private:
  std::atomic<bool>& flag_;
};

}  // namespace detail

}  // namespace latte
