// Tensor parallelism on CUDA: one GPU per rank (cuda:first .. cuda:first+N-1), one host thread per
// rank driving its GPU, NCCL between them. Each rank uploads only its shard of the plan
// (parallel/shard_plan.hpp, cut by parallel/tensor_parallel_model.cpp) and runs the CUDA forward pass
// over it; at the two reduction points of every block (after attn_output, after the FFN) the ranks'
// shares are summed by an in-place fp32 all-reduce of the residual stream on the step's stream (no
// host round trip). The KV cache of a sequence is per rank: `standard` caches the rank's heads, `mla`
// a full copy of c|k_pe on every rank. Rank 0 holds the output head (the others skip it) and produces
// the logits (LATTE_TP_OUTPUT=split instead splits the head by vocabulary rows over the ranks and
// gathers the logits to rank 0). Decode steps are captured in CUDA graphs per rank like on one GPU, the NCCL
// all-reduces inside them (LATTE_CUDA_GRAPHS=0 runs them eagerly).
//
//   auto model = latte::Model::load("m.gguf", {.device = latte::Device::cuda(0), .tensor_parallel = 2});
//   latte::Session s(model, {.attention = "mla"});   // create_tensor_parallel_cuda_forward behind it
//
// A model split over processes (ModelParams::tensor_parallel_from_launch, tensor_parallel_launch.cpp):
// each process holds one rank (TensorParallelDevices::launch_rank) on cuda:(local rank), its NCCL
// communicator joined through the launch's id file, and runs it with one CudaRankForward, no threads;
// every rank ends each step with the same logits (the split head's all-gather, or rank 0's broadcast).
#pragma once

#include "model/forward.hpp"
#include "model/model_state.hpp"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace latte::detail {
class Communicator;
struct LaunchEnvironment;
}  // namespace latte::detail

namespace latte::cuda {

class DeviceWeights;

/// The device side of a model loaded with tensor_parallel = N on CUDA, shared by its sessions.
struct TensorParallelDevices {
  TensorParallelDevices();
  ~TensorParallelDevices();
  TensorParallelDevices(const TensorParallelDevices&) = delete;
  TensorParallelDevices& operator=(const TensorParallelDevices&) = delete;

  int first_device = 0;                                       ///< rank r runs on cuda:(first_device + r)
  std::vector<std::shared_ptr<const DeviceWeights>> weights;  ///< [N] each rank's shard on its GPU
  std::vector<std::unique_ptr<detail::Communicator>> ranks;   ///< [N] NCCL communicators (one group)
  /// One step at a time over the group: the communicators are shared by every session of the model.
  std::mutex step;
  /// The output head split by vocabulary rows over the ranks (LATTE_TP_OUTPUT=split at load, when
  /// n_vocab divides evenly): each rank computes its slice of the logits, rank 0 gathers them. Else
  /// rank 0 alone holds the whole head and computes the logits.
  bool split_output = false;
  /// Set when a step failed after collectives were queued: the communicators were aborted and the
  /// model's sessions throw from then on (load the model again).
  std::string failure;
  /// A multi-process launch (ModelParams::tensor_parallel_from_launch): this process runs rank
  /// `launch_rank` alone, on cuda:first_device; `weights` and `ranks` hold that rank's one entry, and
  /// every rank ends each step with the same logits. -1: every rank runs in this process.
  int launch_rank = -1;
};

/// Checks, before anything is read, that tensor_parallel = `world` can run from cuda:`first`: NCCL is
/// compiled in (else Error(unsupported)) and cuda:first .. cuda:first+world-1 exist (else
/// Error(invalid_argument) saying how many CUDA devices were found).
void require_tensor_parallel_devices(int first, int world);

/// Uploads each rank's shard of `state.tensor_parallel` to its GPU and joins the ranks in an NCCL
/// group. Every rank's fit is checked before any upload: Error(out_of_memory) names the rank, its
/// device, the bytes its shard needs and the bytes free.
std::shared_ptr<TensorParallelDevices> load_tensor_parallel_devices(const detail::ModelState& state, int first);

/// Checks, before anything is read, that this process can run its rank of a multi-process launch:
/// NCCL is compiled in (else Error(unsupported)) and GPU env.local_rank exists (else Error(device)
/// saying how many CUDA devices the host has).
void require_launch_rank_device(const detail::LaunchEnvironment& env);

/// Uploads this process's shard (state.tensor_parallel->only_rank, = env.rank) to cuda:env.local_rank
/// and joins the group through env.id_file: rank 0 publishes a new NCCL id there, the others wait
/// for it (LATTE_TP_TIMEOUT_S seconds, default 600). Error(out_of_memory) when the shard does not fit.
/// The output head is split by vocabulary rows when n_vocab divides evenly (LATTE_TP_OUTPUT=replicated
/// keeps it whole on rank 0, which then broadcasts the logits).
std::shared_ptr<TensorParallelDevices> load_launch_rank_devices(const detail::ModelState& state,
                                                                const detail::LaunchEnvironment& env);

/// The forward pass of a session over the model's ranks with attention backend `backend_name` (a
/// CUDA backend created per rank for its shard). Like the CPU one, the caches of the batches it runs
/// only count tokens; each sequence keeps its per-rank device caches in KvCache::forward_state.
std::unique_ptr<detail::ForwardPass> create_tensor_parallel_cuda_forward(const detail::ModelState& model,
                                                                         const std::string& backend_name);

/// The forward pass of a session over the one rank of a multi-process launch this process runs (what
/// create_tensor_parallel_cuda_forward returns for such a model). Steps are SPMD: every process must
/// run the same batches in the same order. Before a step's first collective the ranks agree that
/// each prepared it (a host-side failure on any rank then fails the step on every rank, and the
/// group stays usable); a rank whose step fails later aborts its communicator, and a rank whose
/// step waits on a failed peer aborts its own when NCCL reports an error or after
/// LATTE_TP_TIMEOUT_S seconds (default 600; 0 waits forever): every rank throws Error(device), and
/// the model's sessions throw from then on.
std::unique_ptr<detail::ForwardPass> create_launch_rank_cuda_forward(const detail::ModelState& model,
                                                                     const std::string& backend_name);

}  // namespace latte::cuda
