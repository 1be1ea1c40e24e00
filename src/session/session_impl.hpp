// The state behind latte::Session, shared by session.cpp (eval, truncate, fork) and
// session_state.cpp (save_state / load_state).
#pragma once

#include "cpu/thread_pool.hpp"
#include "model/architecture.hpp"
#include "model/forward.hpp"
#include "model/model_state.hpp"
#include "session/kv_cache.hpp"

#include <latte/attention.hpp>
#include <latte/session.hpp>
#include <latte/token.hpp>

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
  std::vector<Token> tokens;  // [cache.n_tokens()] the ids whose rows the cache holds, in order
  std::vector<float> logits;  // [n_logit_rows, n_vocab]
  int n_last = 0;             // tokens of the last eval (0: no logits held)
  bool have_all_logits = false;
};

}  // namespace latte
