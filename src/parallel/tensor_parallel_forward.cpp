// Tensor-parallel CPU forward pass (see tensor_parallel_forward.hpp).
#include "parallel/tensor_parallel_forward.hpp"

#include "cpu/thread_pool.hpp"
#include "model/architecture.hpp"
#include "parallel/in_process_communicator.hpp"
#include "parallel/tensor_parallel_model.hpp"

#include <latte/attention.hpp>
#include <latte/error.hpp>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

namespace latte::detail {

namespace {

/// Taps whose second dimension is the rank's attention heads; the others are the same on every rank
/// (computed from the replicated residual stream or after an all-reduce).
bool head_sharded_tap(std::string_view name) {
  for (std::string_view suffix : {".q", ".q_pe", ".attn_heads"}) {
    if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix) return true;
  }
  return false;
}

/// One rank's taps of a step, in emission order.
struct RankTaps {
  std::vector<diagnostics::TapRecord> taps;
  TapObserver observer;
};

/// Emits rank 0's taps in their order, with every head-sharded tap ([T, heads of the rank, D] on each
/// rank) gathered over the ranks in head order into [T, all heads, D], as the unsharded pass emits it.
void emit_gathered_taps(const std::vector<RankTaps>& ranks, const TapSink& sink) {
  const std::vector<diagnostics::TapRecord>& first = ranks.front().taps;
  std::vector<float> gathered;
  for (size_t i = 0; i < first.size(); ++i) {
    const diagnostics::TapRecord& tap = first[i];
    if (!head_sharded_tap(tap.name) || tap.shape.size() != 3) {
      if (tap.shape.size() == 1) sink.emit(tap.name, tap.layer, {tap.shape[0]}, tap.data.data());
      if (tap.shape.size() == 2) sink.emit(tap.name, tap.layer, {tap.shape[0], tap.shape[1]}, tap.data.data());
      if (tap.shape.size() == 3) {
        sink.emit(tap.name, tap.layer, {tap.shape[0], tap.shape[1], tap.shape[2]}, tap.data.data());
      }
      continue;
    }
    const int64_t rows = tap.shape[0], dim = tap.shape[2];
    // Each rank's part (a name occurs once per step; ranks > 0 record only the head-sharded taps).
    std::vector<const diagnostics::TapRecord*> parts;
    int64_t heads = 0;
    for (const RankTaps& r : ranks) {
      const auto it = std::find_if(r.taps.begin(), r.taps.end(),
                                   [&](const diagnostics::TapRecord& t) { return t.name == tap.name; });
      if (it == r.taps.end() || it->shape.size() != 3 || it->shape[0] != rows || it->shape[2] != dim) {
        throw Error(ErrorCode::internal, "tensor-parallel tap " + tap.name + " is missing or differs on a rank");
      }
      parts.push_back(&*it);
      heads += it->shape[1];
    }
    gathered.assign(static_cast<size_t>(rows * heads * dim), 0.0f);
    int64_t head0 = 0;
    for (const diagnostics::TapRecord* part : parts) {
      const int64_t width = part->shape[1] * dim;
      for (int64_t t = 0; t < rows; ++t) {
        std::copy_n(part->data.data() + t * width, width, gathered.data() + (t * heads + head0) * dim);
      }
      head0 += part->shape[1];
    }
    sink.emit(tap.name, tap.layer, {rows, heads, dim}, gathered.data());
  }
}

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

    // Taps: each rank records its own (rank 0 every wanted tap, the others only the head-sharded
    // ones); after the step they are emitted in rank 0's order with the head-sharded ones gathered.
    std::vector<RankTaps> rank_taps(batch.taps ? ranks_.size() : 0);
    std::vector<std::unique_ptr<TapSink>> rank_sinks;
    std::mutex wants_mutex;
    for (size_t r = 0; r < rank_taps.size(); ++r) {
      std::vector<diagnostics::TapRecord>* taps = &rank_taps[r].taps;
      const TapSink* outer = batch.taps;
      rank_taps[r].observer = {
          .wants =
              [outer, r, &wants_mutex](std::string_view name) {
                if (r > 0 && !head_sharded_tap(name)) return false;
                const std::lock_guard lock(wants_mutex);  // the caller's wants need not be thread-safe
                return outer->wants(name);
              },
          .on_tap =
              [taps](const Tap& tap) {
                taps->push_back({.name = std::string(tap.name),
                                 .layer = tap.layer,
                                 .shape = std::vector<int64_t>(tap.shape.begin(), tap.shape.end()),
                                 .data = std::vector<float>(tap.data.begin(), tap.data.end())});
              }};
      rank_sinks.push_back(std::make_unique<TapSink>(rank_taps[r].observer));
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
                           .logits = r == 0 ? batch.logits : nullptr,
                           .taps = rank_sinks.empty() ? nullptr : rank_sinks[static_cast<size_t>(r)].get()});
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
    if (batch.taps) emit_gathered_taps(rank_taps, *batch.taps);
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
