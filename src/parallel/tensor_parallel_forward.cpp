// Tensor-parallel CPU forward pass (see tensor_parallel_forward.hpp).
#include "parallel/tensor_parallel_forward.hpp"

#include "cpu/thread_pool.hpp"
#include "model/architecture.hpp"
#include "parallel/in_process_communicator.hpp"
#include "parallel/tensor_parallel_model.hpp"

#include <latte/attention.hpp>
#include <latte/error.hpp>

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>

namespace latte::detail {

namespace {

class TensorParallelCpuForward final : public ForwardPass {
 public:
  TensorParallelCpuForward(const ModelState& model, const std::string& backend_name, int n_threads)
      : tp_(*model.tensor_parallel), backend_name_(backend_name), group_(tp_.plan.world_size) {
    const int w = tp_.plan.world_size;
    const int threads_per_rank = std::max(1, n_threads / w);
    ranks_.resize(static_cast<size_t>(w));
    for (int r = 0; r < w; ++r) {
      const RankWeights& shard = tp_.ranks[static_cast<size_t>(r)];
      Rank& rank = ranks_[static_cast<size_t>(r)];
      rank.pool = std::make_unique<cpu::ThreadPool>(threads_per_rank);
      rank.runner = rank.pool->runner();
      rank.context = {
          .communicator = &group_.rank(r), .expert_first = shard.expert_first, .expert_count = shard.expert_count};
      rank.backend = AttentionRegistry::instance().create(backend_name, shard.config, model.device);
      rank.backend->prepare(shard.weights.attention_weights());
      rank.forward =
          architecture_ops(shard.config.arch)
              .create_cpu_rank_forward(shard.config, shard.weights, *rank.backend, rank.runner, rank.context);
    }
  }

  void run(const ForwardBatch& batch) override {
    if (batch.forced != nullptr) {
      throw Error(ErrorCode::unsupported, "forced decisions run on an unsplit CPU forward pass only");
    }
    const int w = static_cast<int>(ranks_.size());
    // Each rank's caches, in step with the sequences' token counts (which truncate/reset move).
    // The rank caches live with the sequence (KvCache::forward_state), so that every forward pass of
    // this model and backend (e.g. another session's, in a batched step) continues them.
    for (Rank& rank : ranks_) rank.sequences.clear();
    for (const BatchSequence& s : batch.sequences) {
      auto* state = static_cast<RankCaches*>(s.cache->forward_state.get());
      if (!state || state->owner != s.cache || state->model != &tp_ || state->backend != backend_name_) {
        auto fresh = std::make_shared<RankCaches>();
        fresh->owner = s.cache;  // a copied KvCache gets its own (then the token counts disagree: an error)
        fresh->model = &tp_;
        fresh->backend = backend_name_;
        for (size_t r = 0; r < ranks_.size(); ++r) {
          const ModelConfig& config = tp_.ranks[r].config;
          fresh->caches.push_back(std::make_unique<KvCache>(s.cache->n_layer(), ranks_[r].backend->kv_layout(),
                                                            config.has_indexer() ? config.indexer.head_dim : 0,
                                                            s.cache->n_ctx()));
        }
        state = fresh.get();
        s.cache->forward_state = std::move(fresh);
      }
      for (size_t r = 0; r < ranks_.size(); ++r) {
        Rank& rank = ranks_[r];
        KvCache* cache = state->caches[r].get();
        if (s.cache->n_tokens() > cache->n_tokens()) {
          throw Error(ErrorCode::internal, "tensor-parallel cache holds " + std::to_string(cache->n_tokens()) +
                                               " tokens, the sequence " + std::to_string(s.cache->n_tokens()));
        }
        cache->set_n_tokens(s.cache->n_tokens());
        rank.sequences.push_back({.cache = cache, .first_row = s.first_row, .n_tokens = s.n_tokens});
      }
      s.cache->reserve(s.cache->n_tokens() + s.n_tokens);
    }

    std::exception_ptr first_error;
    std::mutex error_mutex;
    auto run_rank = [&](int r) {
      Rank& rank = ranks_[static_cast<size_t>(r)];
      try {
        // Every rank ends with the same residual stream; only rank 0 computes the logits.
        const std::span<const int> rows = r == 0 ? batch.logit_rows : std::span<const int>{};
        rank.forward->run({.tokens = batch.tokens,
                           .sequences = rank.sequences,
                           .logit_rows = rows,
                           .logits = r == 0 ? batch.logits : nullptr});
      } catch (const std::exception& e) {
        {
          const std::lock_guard lock(error_mutex);
          if (!first_error) first_error = std::current_exception();
        }
        group_.abort("rank " + std::to_string(r) + ": " + e.what());
      }
    };
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(w - 1));
    for (int r = 1; r < w; ++r) threads.emplace_back(run_rank, r);
    run_rank(0);
    for (std::thread& t : threads) t.join();
    if (first_error) {
      group_.reset();
      for (Rank& rank : ranks_) {
        for (size_t i = 0; i < batch.sequences.size(); ++i) {
          rank.sequences[i].cache->set_n_tokens(batch.sequences[i].cache->n_tokens());
        }
      }
      std::rethrow_exception(first_error);
    }
    for (const BatchSequence& s : batch.sequences) s.cache->set_n_tokens(s.cache->n_tokens() + s.n_tokens);
  }

 private:
  struct Rank {
    std::unique_ptr<cpu::ThreadPool> pool;
    TaskRunner runner;
    RankContext context;
    std::unique_ptr<AttentionBackend> backend;
    std::unique_ptr<ForwardPass> forward;
    std::vector<BatchSequence> sequences;  // this step's, over the rank's caches
  };
  /// One sequence's caches, one per rank, for one model and backend.
  struct RankCaches {
    const KvCache* owner = nullptr;
    const TensorParallelModel* model = nullptr;
    std::string backend;
    std::vector<std::unique_ptr<KvCache>> caches;
  };

  const TensorParallelModel& tp_;
  std::string backend_name_;
  InProcessGroup group_;
  std::vector<Rank> ranks_;
};

}  // namespace

std::unique_ptr<ForwardPass> create_tensor_parallel_cpu_forward(const ModelState& model,
                                                                const std::string& backend_name, int n_threads) {
  if (!model.tensor_parallel) throw Error(ErrorCode::internal, "the model is not tensor-parallel");
  return std::make_unique<TensorParallelCpuForward>(model, backend_name, n_threads);
}

}  // namespace latte::detail
