// Cutting a loaded model into per-rank shards (see tensor_parallel_model.hpp).
#include "parallel/tensor_parallel_model.hpp"

#include <latte/error.hpp>

#include <cstring>
#include <string>

namespace latte::detail {

TensorView shard_view(const TensorView& full, const TensorShard& shard, int rank,
                      std::vector<std::unique_ptr<std::vector<std::byte>>>& owned) {
  const ShardRange range = shard.ranges.at(static_cast<size_t>(rank));
  TensorView v = full;
  switch (shard.kind) {
    case ShardKind::replicated:
      return full;
    case ShardKind::rows: {
      v = full.rows(range.first, range.count);
      // 3-D tensors (per head, per expert) keep their third dimension over the held heads/experts.
      if (full.ne[2] > 1 && range.count % full.ne[1] == 0) v.ne = {full.ne[0], full.ne[1], range.count / full.ne[1], 1};
      return v;
    }
    case ShardKind::columns: {
      const size_t offset = row_bytes(full.type, static_cast<uint64_t>(range.first));
      const size_t bytes = row_bytes(full.type, static_cast<uint64_t>(range.count));
      const int64_t n_rows = full.n_rows();
      auto buffer = std::make_unique<std::vector<std::byte>>(bytes * static_cast<size_t>(n_rows));
      for (int64_t r = 0; r < n_rows; ++r) {
        std::memcpy(buffer->data() + static_cast<size_t>(r) * bytes,
                    full.data + static_cast<size_t>(r) * full.row_bytes + offset, bytes);
      }
      v.ne = {range.count, full.ne[1], full.ne[2], full.ne[3]};
      v.data = buffer->data();
      v.row_bytes = bytes;
      owned.push_back(std::move(buffer));
      return v;
    }
    case ShardKind::group_rows: {
      const int64_t n_groups = full.n_rows() / shard.group_rows;
      auto buffer =
          std::make_unique<std::vector<std::byte>>(full.row_bytes * static_cast<size_t>(n_groups * range.count));
      for (int64_t g = 0; g < n_groups; ++g) {
        std::memcpy(buffer->data() + static_cast<size_t>(g * range.count) * full.row_bytes,
                    full.data + static_cast<size_t>(g * shard.group_rows + range.first) * full.row_bytes,
                    static_cast<size_t>(range.count) * full.row_bytes);
      }
      v.ne = {full.ne[0], full.ne[1] * range.count / shard.group_rows, full.ne[2], full.ne[3]};
      v.data = buffer->data();
      owned.push_back(std::move(buffer));
      return v;
    }
  }
  throw Error(ErrorCode::internal, "unknown shard kind for " + shard.name);
}

std::shared_ptr<const TensorParallelModel> shard_model(const ModelConfig& config, const ModelWeights& weights,
                                                       ShardPlan plan, int only_rank) {
  auto model = std::make_shared<TensorParallelModel>();
  const int w = plan.world_size;
  if (only_rank >= w) {
    throw Error(ErrorCode::internal, "shard_model: rank " + std::to_string(only_rank) + " of " + std::to_string(w));
  }
  model->only_rank = only_rank < 0 ? -1 : only_rank;
  const bool has_moe = config.n_dense_lead < config.n_layer_main();
  model->ranks.resize(static_cast<size_t>(w));
  const std::vector<TensorSpec> specs = expected_tensors(config);
  for (int r = 0; r < w; ++r) {
    RankWeights& rank = model->ranks[static_cast<size_t>(r)];
    rank.rank = r;
    rank.config = config;
    rank.config.n_head = plan.heads_per_rank;
    if (has_moe && plan.moe == MoeSplit::tensor_parallel) {
      rank.config.n_ff_expert = config.n_ff_expert / w;
      rank.expert_first = 0;
      rank.expert_count = config.n_expert;
    } else {
      rank.expert_first = r * plan.experts_per_rank;
      rank.expert_count = plan.experts_per_rank;
    }
    if (model->only_rank >= 0 && r != model->only_rank) continue;  // another process's shard
    rank.weights.layers.resize(weights.layers.size());
    for (const TensorSpec& spec : specs) {
      if (spec.mtp) continue;
      const TensorView* full = nullptr;
      TensorView* out = nullptr;
      if (spec.global_slot) {
        full = &(weights.*spec.global_slot);
        out = &(rank.weights.*spec.global_slot);
      } else if (spec.layer_slot && spec.layer >= 0 && static_cast<size_t>(spec.layer) < weights.layers.size()) {
        full = &(weights.layers[static_cast<size_t>(spec.layer)].*spec.layer_slot);
        out = &(rank.weights.layers[static_cast<size_t>(spec.layer)].*spec.layer_slot);
      }
      if (!full || !*full) continue;
      const TensorShard* shard = plan.find(spec.name);
      if (!shard) throw Error(ErrorCode::internal, "the tensor-parallel plan has no entry for " + spec.name);
      *out = shard_view(*full, *shard, r, rank.owned);
    }
    // `output` may be token_embd (tied embeddings): the global slots above map it by name.
    if (!rank.weights.output) rank.weights.output = rank.weights.token_embd;
  }
  model->plan = std::move(plan);
  return model;
}

}  // namespace latte::detail
