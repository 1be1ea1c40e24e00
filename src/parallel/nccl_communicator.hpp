// The NCCL communicator: one rank per GPU, collectives on device buffers ordered on the rank's
// stream. Built with LATTE_NCCL (LATTE_WITH_NCCL is then defined). Bootstraps:
//   - in-process, one thread per GPU: create_in_process({0, 1, ...}) (ncclCommInitAll);
//   - multi-process or multi-host: from_environment(read_launch_environment()), rank 0 publishing
//     the unique id to LATTE_TP_ID_FILE and every rank reading it (see launch_environment.hpp).
//
//   auto env = latte::detail::read_launch_environment();
//   auto comm = latte::detail::NcclCommunicator::from_environment(*env);
//   comm->all_reduce_sum(device_ptr, n, latte::detail::CollectiveType::bf16); comm->synchronize();
#pragma once

#include "parallel/communicator.hpp"
#include "parallel/launch_environment.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace latte::detail {

/// One GPU's endpoint of an NCCL group. Owns its ncclComm_t and stream (RAII).
class NcclCommunicator final : public Communicator {
 public:
  /// Bytes of an ncclUniqueId.
  static size_t unique_id_size() noexcept;
  /// A fresh ncclUniqueId (rank 0 makes it, every rank must receive the same bytes).
  static std::vector<std::byte> new_unique_id();

  /// Joins the group as `rank` of `world_size` on CUDA device `device`; every rank must call this
  /// concurrently with the same id. Throws Error(device) with NCCL's message on failure.
  NcclCommunicator(std::span<const std::byte> unique_id, int rank, int world_size, int device);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  /// Multi-process bootstrap: rank 0 writes a new id to env.id_file, the others wait for it (up to
  /// `timeout`); device = env.local_rank. The id file must be fresh for each launch.
  static std::unique_ptr<NcclCommunicator> from_environment(
      const LaunchEnvironment& env, std::chrono::milliseconds timeout = std::chrono::minutes(2));
  /// In-process bootstrap: one communicator per device, rank i on devices[i].
  static std::vector<std::unique_ptr<NcclCommunicator>> create_in_process(std::span<const int> devices);

  [[nodiscard]] int rank() const noexcept override { return rank_; }
  [[nodiscard]] int world_size() const noexcept override { return world_size_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  /// The cudaStream_t the collectives are queued on (the rank's forward pass should use it too).
  [[nodiscard]] void* stream() const noexcept { return stream_; }

  void all_reduce_sum(void* data, size_t count, CollectiveType type) override;
  void all_gather(const void* send, void* recv, size_t count, CollectiveType type) override;
  void broadcast(void* data, size_t count, CollectiveType type, int root) override;
  /// Waits for every queued collective; throws Error(device) on an asynchronous NCCL error.
  void synchronize();
  /// Queues later collectives on `stream` (a cudaStream_t of this rank's device, not owned), e.g. the
  /// stream of the forward pass whose buffers they reduce; nullptr goes back to the communicator's own.
  void set_stream(void* stream) noexcept { queue_ = stream ? stream : stream_; }
  /// Aborts the communicator (ncclCommAbort): pending collectives end, later calls throw Error(device).
  /// For a rank that failed in the middle of a step, so that no other rank waits for it forever.
  /// May be called from another thread than the one queuing collectives (a watchdog ending a step
  /// that waits on a failed peer); it then must not race with a collective being queued.
  void abort() noexcept;
  /// NCCL's asynchronous error of the communicator (e.g. a peer over the network gone), or "" when
  /// none (or when aborted). Callable from another thread while a step runs.
  [[nodiscard]] std::string async_error() const;
  /// Whether abort() ran.
  [[nodiscard]] bool aborted() const noexcept { return comm_.load() == nullptr; }

 private:
  struct Adopt {};
  NcclCommunicator(Adopt, void* comm, int rank, int world_size, int device);

  std::atomic<void*> comm_{nullptr};  // ncclComm_t; nullptr once aborted
  // Held by every host-side NCCL call on comm_ and by abort(): another thread's abort (a watchdog)
  // waits for a call in progress instead of freeing the communicator under it.
  mutable std::mutex calls_;
  void* stream_ = nullptr;            // cudaStream_t, owned
  void* queue_ = nullptr;             // cudaStream_t the collectives go to: stream_ or set_stream's
  int rank_ = 0;
  int world_size_ = 1;
  int device_ = 0;
};

}  // namespace latte::detail
