// One rank of a tensor-parallel model per process (see tensor_parallel_cuda.hpp): the shard upload,
// the NCCL group joined through the launch's id file, and the SPMD forward pass of one rank.
#include "core/environment.hpp"
#include "cuda/check.hpp"
#include "cuda/cuda_forward.hpp"
#include "cuda/device_buffer.hpp"
#include "cuda/device_weights.hpp"
#include "cuda/tensor_parallel_cuda.hpp"
#include "parallel/launch_environment.hpp"
#include "parallel/tensor_parallel_model.hpp"

#ifdef LATTE_WITH_NCCL
#include "parallel/nccl_communicator.hpp"
#endif

#include <latte/attention.hpp>
#include <latte/error.hpp>

#include <cuda_runtime.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

namespace latte::cuda {

namespace {

std::string who(const detail::LaunchEnvironment& env) {
  return "rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) + " (" + env.source + ")";
}

[[maybe_unused]] int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  return count;
}

/// LATTE_TP_TIMEOUT_S: how long a rank waits for its peers (rank 0's id at load, a step's end).
[[maybe_unused]] std::chrono::seconds peer_timeout() {
  return std::chrono::seconds(latte::detail::env_int("LATTE_TP_TIMEOUT_S", 600));
}

#ifdef LATTE_WITH_NCCL

constexpr double kMiB = 1024.0 * 1024.0;

std::string mib(uint64_t bytes) {
  return std::to_string(static_cast<int64_t>(static_cast<double>(bytes) / kMiB + 0.5)) + " MiB";
}

detail::NcclCommunicator& nccl(detail::Communicator& c) { return static_cast<detail::NcclCommunicator&>(c); }

/// Ends a step that waits on a failed peer: while armed, a thread polls the communicator's
/// asynchronous error and the time since arm(); on either it aborts the communicator, which ends
/// the collectives this rank waits in. It acts only on an NCCL error or after `timeout` (0: never on
/// time), long after the host has queued the step's collectives.
class StepWatchdog {
 public:
  StepWatchdog(detail::NcclCommunicator& comm, std::chrono::seconds timeout)
      : comm_(comm), timeout_(timeout), thread_([this] { loop(); }) {}
  ~StepWatchdog() {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  StepWatchdog(const StepWatchdog&) = delete;
  StepWatchdog& operator=(const StepWatchdog&) = delete;

  void arm() {
    {
      const std::lock_guard lock(mutex_);
      armed_ = true;
      fired_.clear();
      since_ = std::chrono::steady_clock::now();
    }
    wake_.notify_all();
  }
  /// Stops watching; returns why the communicator was aborted, or "" when it was not.
  std::string disarm() {
    const std::lock_guard lock(mutex_);
    armed_ = false;
    return fired_;
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      if (armed_) {
        wake_.wait_for(lock, std::chrono::milliseconds(20));
      } else {
        wake_.wait(lock, [&] { return stop_ || armed_; });
      }
      if (stop_) return;
      if (!armed_ || !fired_.empty()) continue;
      std::string why = comm_.async_error();
      if (why.empty() && timeout_.count() > 0 && std::chrono::steady_clock::now() - since_ > timeout_) {
        why = "no step end within " + std::to_string(timeout_.count()) +
              " s (LATTE_TP_TIMEOUT_S): a peer process failed, stopped or makes other Session calls";
      } else if (!why.empty()) {
        why = "NCCL reported " + why;
      }
      if (why.empty()) continue;
      fired_ = why;
      comm_.abort();
    }
  }

  detail::NcclCommunicator& comm_;
  std::chrono::seconds timeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool armed_ = false, stop_ = false;
  std::string fired_;
  std::chrono::steady_clock::time_point since_{};
  std::thread thread_;  // last: starts once the members above exist
};

class LaunchRankForward final : public detail::ForwardPass {
 public:
  LaunchRankForward(const detail::ModelState& model, const std::string& backend_name)
      : tp_(*model.tensor_parallel),
        devices_(*model.cuda_tensor_parallel),
        comm_(nccl(*devices_.ranks.at(0))),
        backend_name_(backend_name),
        shard_(tp_.ranks.at(static_cast<size_t>(devices_.launch_rank))),
        device_(devices_.first_device) {
    use_device(device_);
    backend_ = AttentionRegistry::instance().create(backend_name, shard_.config, Device::cuda(device_));
    backend_->prepare(shard_.weights.attention_weights());
    forward_ = create_cuda_rank_forward({.config = &shard_.config,
                                         .weights = devices_.weights.at(0),
                                         .communicator = &comm_,
                                         .expert_first = shard_.expert_first,
                                         .expert_count = shard_.expert_count,
                                         .split_output = devices_.split_output,
                                         .logits_on_every_rank = true},
                                        *backend_);
    flag_ = DeviceBuffer<float>(1, "tensor-parallel step agreement");
    watchdog_ = std::make_unique<StepWatchdog>(comm_, peer_timeout());
  }

  ~LaunchRankForward() override {
    watchdog_.reset();
    const std::lock_guard step(devices_.step);
    comm_.set_stream(nullptr);
    cudaSetDevice(device_);
    forward_.reset();
    backend_.reset();
  }
  LaunchRankForward(const LaunchRankForward&) = delete;
  LaunchRankForward& operator=(const LaunchRankForward&) = delete;

  void run(const detail::ForwardBatch& batch) override {
    const std::lock_guard step(devices_.step);
    if (!devices_.failure.empty()) {
      throw Error(ErrorCode::device, "tensor-parallel model unusable: an earlier step failed (" + devices_.failure +
                                         "); load the model again in every process");
    }
    // Host-side preparation first; its failure is shared with the peers before any of the step's
    // collectives is queued, so that every rank skips the step and the group stays usable.
    std::exception_ptr local;
    try {
      bind_rank_caches(batch);
      forward_->prepare(rank_batch(batch));
    } catch (...) {
      local = std::current_exception();
    }
    watchdog_->arm();
    int failed = 0;  // other ranks that failed to prepare
    try {
      failed = agree(local != nullptr);
    } catch (const std::exception& e) {
      fail(batch, e.what());
    }
    if (local || failed > 0) {
      watchdog_->disarm();
      restore_caches(batch);
      if (local) std::rethrow_exception(local);
      throw Error(ErrorCode::device, "tensor-parallel step not run: " + std::to_string(failed) + " other rank" +
                                         (failed == 1 ? "" : "s") +
                                         " failed to prepare it (their processes report why)");
    }
    comm_.set_stream(forward_->stream_handle());
    try {
      forward_->execute(rank_batch(batch));
    } catch (const std::exception& e) {
      // Its peers may be waiting in a collective this rank will never join: end them.
      comm_.abort();
      fail(batch, e.what());
    }
    comm_.set_stream(nullptr);
    if (const std::string why = watchdog_->disarm(); !why.empty()) fail(batch, why);
    for (const detail::BatchSequence& s : batch.sequences) s.cache->set_n_tokens(s.cache->n_tokens() + s.n_tokens);
  }

 private:
  /// One sequence's cache on this rank, for one model and backend.
  struct RankCache {
    const detail::KvCache* owner = nullptr;
    const detail::TensorParallelModel* model = nullptr;
    std::string backend;
    std::unique_ptr<detail::KvCache> cache;
  };

  /// How many other ranks failed to prepare the step, this one having failed or not: an fp32
  /// all-reduce of one flag per rank on the communicator's own stream, waited for.
  int agree(bool failed) {
    use_device(device_);
    comm_.set_stream(nullptr);
    auto* stream = static_cast<cudaStream_t>(comm_.stream());
    float value = failed ? 1.0f : 0.0f;
    LATTE_CUDA_CHECK(cudaMemcpyAsync(flag_.data(), &value, sizeof value, cudaMemcpyHostToDevice, stream));
    comm_.all_reduce_sum(flag_.data(), 1, detail::CollectiveType::f32);
    LATTE_CUDA_CHECK(cudaMemcpyAsync(&value, flag_.data(), sizeof value, cudaMemcpyDeviceToHost, stream));
    comm_.synchronize();  // throws when the watchdog aborted the communicator meanwhile
    return static_cast<int>(value + 0.5f) - (failed ? 1 : 0);
  }

  /// The step failed after collectives may have been queued: the group is unusable from now on.
  [[noreturn]] void fail(const detail::ForwardBatch& batch, const std::string& what) {
    const std::string why = watchdog_->disarm();
    comm_.abort();
    devices_.failure = "rank " + std::to_string(devices_.launch_rank) + ": " + (why.empty() ? what : why);
    restore_caches(batch);
    throw Error(ErrorCode::device, "tensor-parallel step failed on " + devices_.failure +
                                       "; the communicator was aborted, so every rank's step fails");
  }

  /// This rank's view of the batch: its caches, every logit row, the caller's logits.
  detail::ForwardBatch rank_batch(const detail::ForwardBatch& batch) const {
    return {.tokens = batch.tokens,
            .sequences = sequences_,
            .logit_rows = batch.logit_rows,
            .logits = batch.logits,
            .forced = batch.forced};
  }

  void restore_caches(const detail::ForwardBatch& batch) {
    for (size_t i = 0; i < sequences_.size() && i < batch.sequences.size(); ++i) {
      sequences_[i].cache->set_n_tokens(batch.sequences[i].cache->n_tokens());
    }
  }

  /// Each sequence's cache on this rank (made on first use, kept with the sequence), brought to the
  /// sequence's token count.
  void bind_rank_caches(const detail::ForwardBatch& batch) {
    sequences_.clear();
    for (const detail::BatchSequence& s : batch.sequences) {
      auto* state = static_cast<RankCache*>(s.cache->forward_state.get());
      if (!state || state->owner != s.cache || state->model != &tp_ || state->backend != backend_name_) {
        auto fresh = std::make_shared<RankCache>();
        fresh->owner = s.cache;
        fresh->model = &tp_;
        fresh->backend = backend_name_;
        fresh->cache = std::make_unique<detail::KvCache>(
            s.cache->n_layer(), backend_->kv_layout(), shard_.config.has_indexer() ? shard_.config.indexer.head_dim : 0,
            s.cache->n_ctx());
        state = fresh.get();
        s.cache->forward_state = std::move(fresh);
      }
      detail::KvCache* cache = state->cache.get();
      if (s.cache->n_tokens() > cache->n_tokens()) {
        throw Error(ErrorCode::internal, "tensor-parallel cache of rank " + std::to_string(devices_.launch_rank) +
                                             " holds " + std::to_string(cache->n_tokens()) + " tokens, the sequence " +
                                             std::to_string(s.cache->n_tokens()));
      }
      cache->set_n_tokens(s.cache->n_tokens());
      sequences_.push_back({.cache = cache, .first_row = s.first_row, .n_tokens = s.n_tokens});
      s.cache->reserve(s.cache->n_tokens() + s.n_tokens);
    }
  }

  const detail::TensorParallelModel& tp_;
  TensorParallelDevices& devices_;
  detail::NcclCommunicator& comm_;
  std::string backend_name_;
  const detail::RankWeights& shard_;
  int device_ = 0;
  std::unique_ptr<AttentionBackend> backend_;
  std::unique_ptr<CudaRankForward> forward_;
  DeviceBuffer<float> flag_;
  std::vector<detail::BatchSequence> sequences_;  // this step's, over the rank's caches
  std::unique_ptr<StepWatchdog> watchdog_;
};

#endif  // LATTE_WITH_NCCL

}  // namespace

void require_launch_rank_device(const detail::LaunchEnvironment& env) {
#ifndef LATTE_WITH_NCCL
  throw Error(ErrorCode::unsupported, "tensor_parallel_from_launch (" + who(env) +
                                          "): this latte was built without NCCL, which a model split over "
                                          "processes needs (configure with -DLATTE_NCCL=ON where NCCL is installed)");
#else
  const int count = cuda_device_count();
  if (env.local_rank < 0 || env.local_rank >= count) {
    throw Error(ErrorCode::device, "tensor_parallel_from_launch (" + who(env) + "): local rank " +
                                       std::to_string(env.local_rank) +
                                       " names GPU cuda:" + std::to_string(env.local_rank) + ", but this host has " +
                                       std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s"));
  }
#endif
}

std::shared_ptr<TensorParallelDevices> load_launch_rank_devices(const detail::ModelState& state,
                                                                const detail::LaunchEnvironment& env) {
  require_launch_rank_device(env);
  if (!state.tensor_parallel || state.tensor_parallel->only_rank != env.rank) {
    throw Error(ErrorCode::internal, "load_launch_rank_devices: the model is not cut for " + who(env));
  }
#ifndef LATTE_WITH_NCCL
  return nullptr;
#else
  const detail::TensorParallelModel& tp = *state.tensor_parallel;
  const int w = tp.plan.world_size;
  auto out = std::make_shared<TensorParallelDevices>();
  out->first_device = env.local_rank;
  out->launch_rank = env.rank;
  const std::string output_mode = latte::detail::env_choice("LATTE_TP_OUTPUT", "split");
  out->split_output = output_mode == "split" && state.config.n_vocab % w == 0;
  const int64_t slice = state.config.n_vocab / w;
  const UploadOptions options =
      out->split_output
          ? UploadOptions{.output = true, .output_first = env.rank * slice, .output_rows = slice, .label = who(env)}
          : UploadOptions{.output = env.rank == 0, .label = who(env)};
  const detail::RankWeights& shard = tp.ranks.at(static_cast<size_t>(env.rank));
  const size_t needed = device_bytes_needed(shard.config, shard.weights, options);
  use_device(env.local_rank);
  size_t free_bytes = 0, total_bytes = 0;
  LATTE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (needed > free_bytes) {
    throw Error(ErrorCode::out_of_memory, state.file.path() + ": the shard of " + who(env) + " needs " + mib(needed) +
                                              " on cuda:" + std::to_string(env.local_rank) + ", which has " +
                                              mib(free_bytes) + " free of " + mib(total_bytes) +
                                              " (latte inspect --tp prints the plan's bytes per rank)");
  }
  out->weights.push_back(upload_weights(shard.config, shard.weights, state.file.path(), env.local_rank, options));
  std::chrono::milliseconds wait = peer_timeout();
  if (wait.count() == 0) wait = std::chrono::hours(24 * 365);
  out->ranks.push_back(detail::NcclCommunicator::from_environment(env, wait));
  return out;
#endif
}

std::unique_ptr<detail::ForwardPass> create_launch_rank_cuda_forward(const detail::ModelState& model,
                                                                     const std::string& backend_name) {
  if (!model.tensor_parallel || !model.cuda_tensor_parallel || model.cuda_tensor_parallel->launch_rank < 0) {
    throw Error(ErrorCode::internal, "create_launch_rank_cuda_forward: the model is not one rank of a launch");
  }
#ifdef LATTE_WITH_NCCL
  return std::make_unique<LaunchRankForward>(model, backend_name);
#else
  (void)backend_name;
  throw Error(ErrorCode::unsupported, "tensor parallelism on CUDA needs NCCL (configure with -DLATTE_NCCL=ON)");
#endif
}

}  // namespace latte::cuda
