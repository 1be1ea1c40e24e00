// Tensor parallelism on CUDA (see tensor_parallel_cuda.hpp).
#include "cuda/tensor_parallel_cuda.hpp"

#include "core/environment.hpp"

#include "cuda/check.hpp"
#include "cuda/cuda_forward.hpp"
#include "cuda/device_weights.hpp"
#include "parallel/communicator.hpp"
#include "parallel/tensor_parallel_model.hpp"

#ifdef LATTE_WITH_NCCL
#include "parallel/nccl_communicator.hpp"
#endif

#include <latte/attention.hpp>
#include <latte/error.hpp>

#include <cuda_runtime.h>

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <thread>

namespace latte::cuda {

TensorParallelDevices::TensorParallelDevices() = default;
TensorParallelDevices::~TensorParallelDevices() = default;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

[[maybe_unused]] std::string mib(uint64_t bytes) {
  return std::to_string(static_cast<int64_t>(static_cast<double>(bytes) / kMiB + 0.5)) + " MiB";
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  return count;
}

std::string degree_on(int first, int world) {
  return "tensor_parallel = " + std::to_string(world) + " on cuda:" + std::to_string(first);
}

/// Threads 1..N-1 of a group, kept for the life of a forward pass; rank 0's task runs on the caller.
class RankThreads {
 public:
  explicit RankThreads(int world) {
    for (int r = 1; r < world; ++r) threads_.emplace_back([this, r] { loop(r); });
  }
  ~RankThreads() {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  /// Runs task(r) for every rank at once and returns when all are done. `task` must not throw.
  void run(const std::function<void(int)>& task) {
    {
      const std::lock_guard lock(mutex_);
      task_ = &task;
      pending_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    wake_.notify_all();
    task(0);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    task_ = nullptr;
  }

 private:
  void loop(int r) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* task = nullptr;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        task = task_;
      }
      (*task)(r);
      {
        const std::lock_guard lock(mutex_);
        --pending_;
      }
      done_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* task_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

#ifdef LATTE_WITH_NCCL

detail::NcclCommunicator& nccl(detail::Communicator& c) { return static_cast<detail::NcclCommunicator&>(c); }

class TensorParallelCudaForward final : public detail::ForwardPass {
 public:
  TensorParallelCudaForward(const detail::ModelState& model, const std::string& backend_name)
      : tp_(*model.tensor_parallel),
        devices_(*model.cuda_tensor_parallel),
        backend_name_(backend_name),
        threads_(tp_.plan.world_size) {
    const int w = tp_.plan.world_size;
    ranks_.resize(static_cast<size_t>(w));
    for (int r = 0; r < w; ++r) {
      const detail::RankWeights& shard = tp_.ranks[static_cast<size_t>(r)];
      Rank& rank = ranks_[static_cast<size_t>(r)];
      const Device device = Device::cuda(devices_.first_device + r);
      use_device(device.index);
      rank.backend = AttentionRegistry::instance().create(backend_name, shard.config, device);
      rank.backend->prepare(shard.weights.attention_weights());
      rank.forward = create_cuda_rank_forward({.config = &shard.config,
                                               .weights = devices_.weights[static_cast<size_t>(r)],
                                               .communicator = devices_.ranks[static_cast<size_t>(r)].get(),
                                               .expert_first = shard.expert_first,
                                               .expert_count = shard.expert_count,
                                               .split_output = devices_.split_output},
                                              *rank.backend);
    }
  }

  ~TensorParallelCudaForward() override {
    // The rank passes' streams may still be named by the communicators: point them back at their own.
    const std::lock_guard step(devices_.step);
    for (auto& c : devices_.ranks) nccl(*c).set_stream(nullptr);
    // Each rank's pass and backend (streams, graphs, library handles) go with their device current.
    for (size_t r = 0; r < ranks_.size(); ++r) {
      cudaSetDevice(devices_.first_device + static_cast<int>(r));
      ranks_[r].forward.reset();
      ranks_[r].backend.reset();
    }
    cudaSetDevice(devices_.first_device);
  }
  TensorParallelCudaForward(const TensorParallelCudaForward&) = delete;
  TensorParallelCudaForward& operator=(const TensorParallelCudaForward&) = delete;

  void run(const detail::ForwardBatch& batch) override {
    const std::lock_guard step(devices_.step);
    if (!devices_.failure.empty()) {
      throw Error(ErrorCode::device, "tensor-parallel model unusable: an earlier step failed (" + devices_.failure +
                                         "); load the model again");
    }
    bind_rank_caches(batch);
    const int w = static_cast<int>(ranks_.size());
    std::vector<std::exception_ptr> errors(static_cast<size_t>(w));
    auto on_ranks = [&](auto&& body) {
      for (auto& e : errors) e = nullptr;
      threads_.run([&](int r) {
        try {
          body(r);
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
        }
      });
    };
    auto first_error = [&]() -> std::exception_ptr {
      for (const auto& e : errors) {
        if (e) return e;
      }
      return nullptr;
    };
    auto restore_caches = [&] {
      for (Rank& rank : ranks_) {
        for (size_t i = 0; i < batch.sequences.size(); ++i) {
          rank.sequences[i].cache->set_n_tokens(batch.sequences[i].cache->n_tokens());
        }
      }
    };
    // Every rank prepares (caches, buffers, inputs) before any queues a collective: a host-side
    // failure stops the step on all ranks, and the group stays usable.
    on_ranks([&](int r) {
      Rank& rank = ranks_[static_cast<size_t>(r)];
      rank.forward->prepare(rank_batch(batch, r));
    });
    if (const std::exception_ptr e = first_error()) {
      restore_caches();
      std::rethrow_exception(e);
    }
    for (int r = 0; r < w; ++r) {
      nccl(*devices_.ranks[static_cast<size_t>(r)]).set_stream(ranks_[static_cast<size_t>(r)].forward->stream_handle());
    }
    on_ranks([&](int r) {
      Rank& rank = ranks_[static_cast<size_t>(r)];
      try {
        rank.forward->execute(rank_batch(batch, r));
      } catch (...) {
        // Its peers may be waiting in a collective this rank will never join: end them.
        for (auto& c : devices_.ranks) nccl(*c).abort();
        throw;
      }
    });
    if (const std::exception_ptr e = first_error()) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        devices_.failure = ex.what();
      }
      restore_caches();
      std::rethrow_exception(e);
    }
    for (const detail::BatchSequence& s : batch.sequences) s.cache->set_n_tokens(s.cache->n_tokens() + s.n_tokens);
  }

 private:
  struct Rank {
    std::unique_ptr<AttentionBackend> backend;
    std::unique_ptr<CudaRankForward> forward;
    std::vector<detail::BatchSequence> sequences;  // this step's, over the rank's caches
  };
  /// One sequence's caches, one per rank, for one model and backend.
  struct RankCaches {
    const detail::KvCache* owner = nullptr;
    const detail::TensorParallelModel* model = nullptr;
    std::string backend;
    std::vector<std::unique_ptr<detail::KvCache>> caches;
  };

  /// Rank r's view of the batch: its caches; only rank 0 computes logits.
  detail::ForwardBatch rank_batch(const detail::ForwardBatch& batch, int r) const {
    return {.tokens = batch.tokens,
            .sequences = ranks_[static_cast<size_t>(r)].sequences,
            .logit_rows = r == 0 || devices_.split_output ? batch.logit_rows : std::span<const int>{},
            .logits = r == 0 ? batch.logits : nullptr};
  }

  /// Each sequence's rank caches (made on first use, kept with the sequence so that any forward pass
  /// of this model and backend continues them), brought to the sequence's token count.
  void bind_rank_caches(const detail::ForwardBatch& batch) {
    for (Rank& rank : ranks_) rank.sequences.clear();
    for (const detail::BatchSequence& s : batch.sequences) {
      auto* state = static_cast<RankCaches*>(s.cache->forward_state.get());
      if (!state || state->owner != s.cache || state->model != &tp_ || state->backend != backend_name_) {
        auto fresh = std::make_shared<RankCaches>();
        fresh->owner = s.cache;
        fresh->model = &tp_;
        fresh->backend = backend_name_;
        for (size_t r = 0; r < ranks_.size(); ++r) {
          const ModelConfig& config = tp_.ranks[r].config;
          fresh->caches.push_back(std::make_unique<detail::KvCache>(s.cache->n_layer(), ranks_[r].backend->kv_layout(),
                                                                    config.has_indexer() ? config.indexer.head_dim : 0,
                                                                    s.cache->n_ctx()));
        }
        state = fresh.get();
        s.cache->forward_state = std::move(fresh);
      }
      for (size_t r = 0; r < ranks_.size(); ++r) {
        detail::KvCache* cache = state->caches[r].get();
        if (s.cache->n_tokens() > cache->n_tokens()) {
          throw Error(ErrorCode::internal, "tensor-parallel cache of rank " + std::to_string(r) + " holds " +
                                               std::to_string(cache->n_tokens()) + " tokens, the sequence " +
                                               std::to_string(s.cache->n_tokens()));
        }
        cache->set_n_tokens(s.cache->n_tokens());
        ranks_[r].sequences.push_back({.cache = cache, .first_row = s.first_row, .n_tokens = s.n_tokens});
      }
      s.cache->reserve(s.cache->n_tokens() + s.n_tokens);
    }
  }

  const detail::TensorParallelModel& tp_;
  TensorParallelDevices& devices_;
  std::string backend_name_;
  std::vector<Rank> ranks_;
  RankThreads threads_;  // last: its threads stop before the ranks go
};

#endif  // LATTE_WITH_NCCL

}  // namespace

void require_tensor_parallel_devices(int first, int world) {
  // the GPUs first: asking for more ranks than the host has GPUs is the caller's mistake in any build
  const int count = cuda_device_count();
  if (first < 0 || first + world > count) {
    throw Error(ErrorCode::invalid_argument, degree_on(first, world) + " needs GPUs cuda:" + std::to_string(first) +
                                                 " to cuda:" + std::to_string(first + world - 1) + ", but " +
                                                 std::to_string(count) + " CUDA device" +
                                                 (count == 1 ? " was" : "s were") + " found");
  }
#ifndef LATTE_WITH_NCCL
  throw Error(ErrorCode::unsupported, degree_on(first, world) +
                                          ": this latte was built without NCCL, which tensor parallelism on "
                                          "CUDA needs (configure with -DLATTE_NCCL=ON where NCCL is installed)");
#endif
}

std::shared_ptr<TensorParallelDevices> load_tensor_parallel_devices(const detail::ModelState& state, int first) {
  if (!state.tensor_parallel) throw Error(ErrorCode::internal, "load_tensor_parallel_devices: the model is not split");
  const detail::TensorParallelModel& tp = *state.tensor_parallel;
  const int w = tp.plan.world_size;
  require_tensor_parallel_devices(first, w);
#ifndef LATTE_WITH_NCCL
  return nullptr;
#else
  auto out = std::make_shared<TensorParallelDevices>();
  out->first_device = first;
  const std::string output_mode = latte::detail::env_choice("LATTE_TP_OUTPUT", "replicated");
  out->split_output = output_mode == "split" && state.config.n_vocab % w == 0;
  const int64_t slice = state.config.n_vocab / w;
  auto options = [&](int r) {
    const std::string label = "rank " + std::to_string(r) + " of " + std::to_string(w);
    if (out->split_output) {
      return UploadOptions{.output = true, .output_first = r * slice, .output_rows = slice, .label = label};
    }
    return UploadOptions{.output = r == 0, .label = label};
  };
  // Every shard must fit before any is uploaded.
  for (int r = 0; r < w; ++r) {
    const detail::RankWeights& shard = tp.ranks[static_cast<size_t>(r)];
    const size_t needed = device_bytes_needed(shard.config, shard.weights, options(r));
    use_device(first + r);
    size_t free_bytes = 0, total_bytes = 0;
    LATTE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (needed > free_bytes) {
      throw Error(ErrorCode::out_of_memory, state.file.path() + ": " + degree_on(first, w) + ": the shard of rank " +
                                                std::to_string(r) + " needs " + mib(needed) +
                                                " on cuda:" + std::to_string(first + r) + ", which has " +
                                                mib(free_bytes) + " free of " + mib(total_bytes) +
                                                " (latte inspect --tp prints the plan's bytes per rank)");
    }
  }
  for (int r = 0; r < w; ++r) {
    const detail::RankWeights& shard = tp.ranks[static_cast<size_t>(r)];
    out->weights.push_back(upload_weights(shard.config, shard.weights, state.file.path(), first + r, options(r)));
  }
  std::vector<int> devices;
  for (int r = 0; r < w; ++r) devices.push_back(first + r);
  for (auto& c : detail::NcclCommunicator::create_in_process(devices)) out->ranks.push_back(std::move(c));
  return out;
#endif
}

std::unique_ptr<detail::ForwardPass> create_tensor_parallel_cuda_forward(const detail::ModelState& model,
                                                                         const std::string& backend_name) {
  if (!model.tensor_parallel || !model.cuda_tensor_parallel) {
    throw Error(ErrorCode::internal, "create_tensor_parallel_cuda_forward: the model is not split over GPUs");
  }
#ifdef LATTE_WITH_NCCL
  if (model.cuda_tensor_parallel->launch_rank >= 0) return create_launch_rank_cuda_forward(model, backend_name);
  return std::make_unique<TensorParallelCudaForward>(model, backend_name);
#else
  (void)backend_name;
  throw Error(ErrorCode::unsupported, "tensor parallelism on CUDA needs NCCL (configure with -DLATTE_NCCL=ON)");
#endif
}

}  // namespace latte::cuda
