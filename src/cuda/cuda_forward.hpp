// The CUDA forward pass of deepseek2 and glm-dsa models: the same per-block steps as the CPU pass
// (model/deepseek2.cpp, model/glm_dsa.cpp) on device buffers, driving the kernels of src/cuda/ on one
// stream. A step over T rows (one prefill chunk, one decode token, or one token of each of several
// sessions) runs without host synchronisation until its logits are copied into pinned memory.
//
//   auto pass = latte::cuda::create_cuda_forward(state, backend);   // backend: a CUDA "mla" / "standard"
//   pass->run(batch);
#pragma once

#include "model/forward.hpp"
#include "model/model_state.hpp"

#include <latte/attention.hpp>

#include <memory>

namespace latte::detail {
class Communicator;
}

namespace latte::cuda {

class DeviceWeights;

/// The CUDA pass with its step in two halves, for the ranks of a tensor-parallel group: prepare() does
/// everything that can fail on the host before a launch (caches, buffers, staged inputs), so that a
/// failing rank can stop every rank before any collective is queued; execute() enqueues the step,
/// waits for it and copies the logits. run() is the two in a row.
class CudaRankForward : public detail::ForwardPass {
 public:
  virtual void prepare(const detail::ForwardBatch& batch) = 0;
  virtual void execute(const detail::ForwardBatch& batch) = 0;
  void run(const detail::ForwardBatch& batch) override {
    prepare(batch);
    execute(batch);
  }
  /// The cudaStream_t the pass runs on (its collectives must be queued on it too).
  [[nodiscard]] virtual void* stream_handle() const noexcept = 0;
};

/// One rank of a tensor-parallel group: its share of the model and the group's communicator.
struct CudaRankSetup {
  const ModelConfig* config = nullptr;             ///< the rank's config (n_head = heads held); outlives the pass
  std::shared_ptr<const DeviceWeights> weights{};  ///< the rank's shard on its device
  detail::Communicator* communicator = nullptr;    ///< device collectives on the pass's stream (NCCL)
  int expert_first = 0;                            ///< expert-parallel: first routed expert held
  int expert_count = 0;                            ///< routed experts held (0 or all: every expert)
  /// The output head is split by vocabulary rows (weights->output holds this rank's n_vocab / N rows):
  /// every rank computes its slice of the logits and rank 0 gathers them. Every rank must then be
  /// given the batch's logit rows (only rank 0 a logits pointer).
  bool split_output = false;
  /// Every rank ends the step with the logits in host memory, the same bits on each (a multi-process
  /// launch, where each process samples for itself): the split head's gathered slices are copied on
  /// every rank, and without a split head rank 0 broadcasts its logits. Every rank must then be given
  /// the batch's logit rows and a logits pointer.
  bool logits_on_every_rank = false;
};

/// Creates the CUDA pass for a model loaded on a CUDA device. Throws Error(unsupported) when `backend`
/// is not a CUDA backend or the model has shapes no kernel covers (named in the message).
std::unique_ptr<detail::ForwardPass> create_cuda_forward(const detail::ModelState& model, AttentionBackend& backend);

/// Creates the pass of one tensor-parallel rank on rank.weights' device: at the two reduction points
/// of every block (after attn_output, after the FFN) x is all-reduced through rank.communicator.
/// Such a pass emits no activation taps. Throws as create_cuda_forward.
std::unique_ptr<CudaRankForward> create_cuda_rank_forward(const CudaRankSetup& rank, AttentionBackend& backend);

}  // namespace latte::cuda
