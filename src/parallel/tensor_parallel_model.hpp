// The per-rank weights of a tensor-parallel model, cut from the loaded file following a ShardPlan:
// row shards are views into the mapping (a rank touches only its rows), column shards (attn_output,
// ffn_down, down_shexp) are repacked per rank because their rows are not contiguous in the file.
// Each rank's config is the model's with n_head = the rank's heads, so an attention backend and a KV
// cache created for it hold only that rank's heads (`standard`) or its own latent copy (`mla`).
#pragma once

#include "model/weights.hpp"
#include "parallel/rank_context.hpp"
#include "parallel/shard_plan.hpp"

#include <cstddef>
#include <memory>
#include <vector>

namespace latte::detail {

/// One rank's share of the model.
struct RankWeights {
  int rank = 0;
  ModelConfig config{};    ///< n_head = heads of this rank; everything else as the model
  ModelWeights weights{};  ///< shard views (3-D tensors keep 3-D shapes over the held heads/experts)
  int expert_first = 0;    ///< first routed expert held (expert-parallel)
  int expert_count = 0;    ///< routed experts held
  std::vector<std::unique_ptr<std::vector<std::byte>>> owned{};  ///< repacked column shards
};

/// The plan and every rank's weights.
struct TensorParallelModel {
  ShardPlan plan{};
  std::vector<RankWeights> ranks{};
  /// -1: every rank's weights are cut (ranks in this process). Else the one rank this process runs
  /// (a multi-process launch): only ranks[only_rank] has weights, the others only config and experts.
  int only_rank = -1;
};

/// Cuts `weights` (views of the whole model) into plan.world_size ranks. Throws Error(unsupported)
/// for a plan this build cannot run (MoE tensor-parallel experts) and Error(internal) for a tensor
/// the plan does not cover. With only_rank >= 0 only that rank's weights are cut, so that a process
/// running one rank reads (repacks) no other rank's columns.
std::shared_ptr<const TensorParallelModel> shard_model(const ModelConfig& config, const ModelWeights& weights,
                                                       ShardPlan plan, int only_rank = -1);

/// The view of rank `rank`'s part of `full` as `shard` says (rows: a view; columns: repacked into a
/// new buffer appended to `owned`).
TensorView shard_view(const TensorView& full, const TensorShard& shard, int rank,
                      std::vector<std::unique_ptr<std::vector<std::byte>>>& owned);

}  // namespace latte::detail
