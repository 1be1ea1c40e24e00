// The tensor-parallel sharding plan: for every weight of a model, which part each rank holds, worked
// out from the config and the GGUF tensor table alone (no tensor data is read), so a degree that
// cannot be honoured fails before anything loads, naming the tensor and the reason.
//
//   attention   by heads: attn_q_b / attn_q rows, attn_k_b / attn_v_b / attn_kv_b heads,
//               attn_output columns; attn_q_a, attn_kv_a_mqa (the fused q_a|kv_a input) replicated
//   dense FFN   ffn_gate / ffn_up rows, ffn_down columns; shared experts the same way
//   routed MoE  expert_parallel: whole experts per rank; tensor_parallel: every expert's F split
//   the rest    replicated (embeddings, norms, router, indexer, output)
// A column split of a quantized matrix must start and end on the type's block boundaries.
//
//   auto plan = latte::detail::plan_tensor_parallel(file, config, {.world_size = 4});
//   std::cout << plan.describe();
#pragma once

#include <latte/model.hpp>
#include <latte/quant.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace latte::gguf {
class File;
}

namespace latte::detail {

using latte::MoeSplit;

/// How one tensor is divided.
enum class ShardKind {
  replicated,  ///< every rank holds all of it
  rows,        ///< rank r holds rows ranges[r] (contiguous in the file)
  columns,     ///< rank r holds columns ranges[r] of every row (ne[0] is split)
  group_rows,  ///< rows in groups of group_rows (one expert); rank r holds ranges[r] of each group
};

/// A half-open range [first, first + count).
struct ShardRange {
  int64_t first = 0;
  int64_t count = 0;
  friend bool operator==(const ShardRange&, const ShardRange&) = default;
};

/// One tensor's split.
struct TensorShard {
  std::string name{};                     ///< GGUF tensor name
  GgmlType type = GgmlType::f32;          ///< element type
  std::array<int64_t, 4> ne{0, 1, 1, 1};  ///< full shape, ne[0] first
  ShardKind kind = ShardKind::replicated;
  std::string unit{};                  ///< what is divided: "heads", "rows", "experts", ...
  int64_t group_rows = 0;              ///< rows per group for the group_* kinds (per expert)
  std::vector<ShardRange> ranges{};    ///< per rank (rows, columns, or rows within each group)
  std::vector<uint64_t> rank_bytes{};  ///< bytes each rank holds
};

/// Inputs of the plan.
struct ShardPlanParams {
  int world_size = 1;
  MoeSplit moe = MoeSplit::expert_parallel;
};

/// The whole plan.
struct ShardPlan {
  int world_size = 1;
  MoeSplit moe = MoeSplit::expert_parallel;
  int heads_per_rank = 0;    ///< attention heads of each rank
  int experts_per_rank = 0;  ///< expert_parallel: routed experts of each rank (0 without MoE)
  std::vector<TensorShard> tensors{};
  std::vector<uint64_t> rank_bytes{};  ///< weight bytes per rank, all tensors
  uint64_t total_bytes = 0;            ///< weight bytes of the unsharded model (tensors of the plan)
  /// KV-cache bytes per token over all inference layers on each rank (fp32 rows):
  /// `standard` caches this rank's heads' K and V, `mla` its own copy of c|k_pe.
  uint64_t standard_cache_bytes_per_token = 0;
  uint64_t mla_cache_bytes_per_token = 0;

  /// The shard of `name`, or nullptr when the tensor is not in the plan.
  [[nodiscard]] const TensorShard* find(std::string_view name) const noexcept;
  /// A readable table: one line per tensor (kind, ranges) and per-rank byte totals.
  [[nodiscard]] std::string describe(bool with_tensors = true) const;
};

/// Plans `params.world_size` ranks for the inference tensors of `file` (MTP blocks are skipped).
/// Throws Error(invalid_argument) for world_size < 1 and Error(unsupported) naming the tensor and
/// the reason when a split cannot be made: a head, FFN-width or expert count not divisible by the
/// degree, or a column split of a quantized matrix that would cut a block. Reads only the tensor table.
ShardPlan plan_tensor_parallel(const gguf::File& file, const ModelConfig& config, const ShardPlanParams& params);

/// Name of a kind ("rows", ...) and of a MoE split ("expert-parallel", "tensor-parallel").
std::string_view shard_kind_name(ShardKind kind) noexcept;
std::string_view moe_split_name(MoeSplit moe) noexcept;

}  // namespace latte::detail
