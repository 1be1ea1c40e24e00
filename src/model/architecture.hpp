// What each architecture provides: the tensors of its blocks and its CPU forward pass. One file per
// architecture (deepseek2.cpp, glm_dsa.cpp) defines its ops; architecture.cpp maps the enum to them.
#pragma once

#include <latte/attention.hpp>
#include <latte/model.hpp>

#include <memory>
#include <vector>

namespace latte::detail {

struct TensorSpec;
struct ModelState;
struct ModelWeights;
struct RankContext;
class ForwardPass;

/// The per-architecture entry points.
struct ArchitectureOps {
  /// Appends the tensors of block `il` (0 <= il < n_layer; MTP blocks flagged `mtp`).
  void (*add_block_tensors)(const ModelConfig& config, int il, std::vector<TensorSpec>& out);
  /// Creates the fp32 CPU forward pass for a session using `backend` for attention.
  std::unique_ptr<ForwardPass> (*create_cpu_forward)(const ModelState& model, AttentionBackend& backend,
                                                     const TaskRunner& runner);
  /// Creates the CPU forward pass of one tensor-parallel rank over its shard (config with the rank's
  /// heads, shard weights), all-reducing through rank.communicator.
  std::unique_ptr<ForwardPass> (*create_cpu_rank_forward)(const ModelConfig& config, const ModelWeights& weights,
                                                          AttentionBackend& backend, const TaskRunner& runner,
                                                          const RankContext& rank);
};

/// The ops of `arch`.
const ArchitectureOps& architecture_ops(Architecture arch);

/// Defined in deepseek2.cpp and glm_dsa.cpp.
const ArchitectureOps& deepseek2_ops();
const ArchitectureOps& glm_dsa_ops();

}  // namespace latte::detail
