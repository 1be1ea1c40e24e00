// The tensor-parallel sharding plan (see shard_plan.hpp): derived from the config and the tensor
// table only.
#include "parallel/shard_plan.hpp"

#include "model/weights.hpp"

#include <latte/error.hpp>
#include <latte/gguf.hpp>

#include <cstdio>
#include <sstream>

namespace latte::detail {

namespace {

std::string bytes_text(uint64_t bytes) {
  char buf[64];
  if (bytes >= (uint64_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << 30));
  } else if (bytes >= (uint64_t{1} << 20)) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << 20));
  } else if (bytes >= 1024) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  }
  return buf;
}

/// The block-relative suffix of a block tensor name ("attn_q_b.weight" for "blk.3.attn_q_b.weight").
std::string_view suffix_of(std::string_view name) {
  if (name.rfind("blk.", 0) != 0) return name;
  const size_t dot = name.find('.', 4);
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

class Planner {
 public:
  Planner(const ModelConfig& c, const ShardPlanParams& p) : c_(c), w_(p.world_size), moe_(p.moe) {}

  TensorShard plan(const gguf::TensorInfo& info) const {
    TensorShard s{.name = info.name, .type = info.type};
    for (size_t i = 0; i < 4; ++i) s.ne[i] = static_cast<int64_t>(info.ne[i]);
    const std::string_view suffix = suffix_of(info.name);
    const int64_t N = c_.n_head, P = c_.qk_nope_head_dim, R = c_.qk_rope_head_dim, V = c_.v_head_dim;
    const int64_t L = c_.kv_lora_rank, F = c_.n_ff_expert, H = c_.n_embd, E = c_.n_expert;
    if (suffix == "attn_q_b.weight" || suffix == "attn_q.weight") {
      split_rows(s, info, "heads", N, P + R);
    } else if (suffix == "attn_k_b.weight") {
      split_rows(s, info, "heads", N, L);
    } else if (suffix == "attn_v_b.weight") {
      split_rows(s, info, "heads", N, V);
    } else if (suffix == "attn_kv_b.weight") {
      split_rows(s, info, "heads", N, P + V);
    } else if (suffix == "attn_output.weight") {
      split_columns(s, info, "heads", N, V);
    } else if (suffix == "ffn_gate.weight" || suffix == "ffn_up.weight" || suffix == "ffn_gate_shexp.weight" ||
               suffix == "ffn_up_shexp.weight") {
      split_rows(s, info, "FFN rows", s.ne[1], 1);
    } else if (suffix == "ffn_down.weight" || suffix == "ffn_down_shexp.weight") {
      split_columns(s, info, "FFN columns", s.ne[0], 1);
    } else if (suffix == "ffn_gate_exps.weight" || suffix == "ffn_up_exps.weight" ||
               suffix == "ffn_gate_up_exps.weight" || suffix == "ffn_down_exps.weight") {
      const bool down = suffix == "ffn_down_exps.weight";
      if (moe_ == MoeSplit::expert_parallel) {
        const int64_t rows_per_expert = down ? H : (suffix == "ffn_gate_up_exps.weight" ? 2 * F : F);
        split_rows(s, info, "experts", E, rows_per_expert);
      } else if (down) {
        split_columns(s, info, "expert FFN columns", F, 1);
      } else {
        // Every expert's F gate (or up) rows are one group; ffn_gate_up_exps holds two groups per
        // expert (gate, then up), so each rank's shard keeps the gate|up order of every expert.
        split_groups(s, info, F);
      }
    } else {
      replicate(s, info);
    }
    return s;
  }

 private:
  [[noreturn]] void fail(const TensorShard& s, const std::string& why) const {
    throw Error(ErrorCode::unsupported,
                "tensor parallel " + std::to_string(w_) + ": cannot split " + s.name + " (" +
                    std::string(type_name(s.type)) + " [" + std::to_string(s.ne[0]) + ", " + std::to_string(s.ne[1]) +
                    (s.ne[2] > 1 ? ", " + std::to_string(s.ne[2]) : std::string()) + "]): " + why);
  }

  void replicate(TensorShard& s, const gguf::TensorInfo& info) const {
    s.kind = ShardKind::replicated;
    s.unit = "replicated";
    s.ranges.assign(static_cast<size_t>(w_), ShardRange{0, static_cast<int64_t>(info.n_rows())});
    s.rank_bytes.assign(static_cast<size_t>(w_), info.n_bytes);
  }

  /// `units` units (heads, experts, rows) of `rows_per_unit` rows each, divided evenly.
  void split_rows(TensorShard& s, const gguf::TensorInfo& info, const char* unit, int64_t units,
                  int64_t rows_per_unit) const {
    if (units % w_ != 0) {
      fail(s, std::to_string(units) + " " + unit + " are not divisible by " + std::to_string(w_) + " ranks");
    }
    if (units * rows_per_unit != static_cast<int64_t>(info.n_rows())) {
      fail(s, "the config implies " + std::to_string(units * rows_per_unit) + " rows, the file has " +
                  std::to_string(info.n_rows()));
    }
    s.kind = ShardKind::rows;
    s.unit = unit;
    const int64_t count = units / w_ * rows_per_unit;
    const uint64_t bytes = row_bytes(info.type, info.ne[0]) * static_cast<uint64_t>(count);
    for (int r = 0; r < w_; ++r) {
      s.ranges.push_back({r * count, count});
      s.rank_bytes.push_back(bytes);
    }
  }

  /// ne[0] = units * values_per_unit split evenly; each rank's columns must be whole blocks.
  void split_columns(TensorShard& s, const gguf::TensorInfo& info, const char* unit, int64_t units,
                     int64_t values_per_unit) const {
    if (units % w_ != 0) {
      fail(s, std::to_string(units) + " " + unit + " are not divisible by " + std::to_string(w_) + " ranks");
    }
    const int64_t count = units / w_ * values_per_unit;
    const int64_t block = type_traits(info.type).block_values;
    if (count % block != 0) {
      fail(s, "each rank's " + std::to_string(count) + " columns would cut " + std::string(type_name(info.type)) +
                  " blocks of " + std::to_string(block) + " values (the split must fall on block boundaries)");
    }
    s.kind = ShardKind::columns;
    s.unit = unit;
    const uint64_t bytes = row_bytes(info.type, static_cast<uint64_t>(count)) * info.n_rows();
    for (int r = 0; r < w_; ++r) {
      s.ranges.push_back({r * count, count});
      s.rank_bytes.push_back(bytes);
    }
  }

  /// Rows in groups of `group` rows; rank r holds the r-th part of every group.
  void split_groups(TensorShard& s, const gguf::TensorInfo& info, int64_t group) const {
    if (group % w_ != 0) {
      fail(s, "the expert width " + std::to_string(group) + " is not divisible by " + std::to_string(w_) + " ranks");
    }
    s.kind = ShardKind::group_rows;
    s.unit = "expert FFN rows";
    s.group_rows = group;
    const int64_t count = group / w_;
    const uint64_t n_groups = info.n_rows() / static_cast<uint64_t>(group);
    const uint64_t bytes = row_bytes(info.type, info.ne[0]) * static_cast<uint64_t>(count) * n_groups;
    for (int r = 0; r < w_; ++r) {
      s.ranges.push_back({r * count, count});
      s.rank_bytes.push_back(bytes);
    }
  }

  const ModelConfig& c_;
  int w_;
  MoeSplit moe_;
};

}  // namespace

std::string_view shard_kind_name(ShardKind kind) noexcept {
  switch (kind) {
    case ShardKind::replicated:
      return "replicated";
    case ShardKind::rows:
      return "rows";
    case ShardKind::columns:
      return "columns";
    case ShardKind::group_rows:
      return "rows of each expert";
  }
  return "?";
}

std::string_view moe_split_name(MoeSplit moe) noexcept {
  return moe == MoeSplit::expert_parallel ? "expert-parallel" : "tensor-parallel";
}

const TensorShard* ShardPlan::find(std::string_view name) const noexcept {
  for (const TensorShard& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

ShardPlan plan_tensor_parallel(const gguf::File& file, const ModelConfig& config, const ShardPlanParams& params) {
  if (params.world_size < 1) {
    throw Error(ErrorCode::invalid_argument,
                "tensor parallel degree must be at least 1 (got " + std::to_string(params.world_size) + ")");
  }
  const int w = params.world_size;
  ShardPlan plan{.world_size = w, .moe = params.moe};
  if (config.n_head % w != 0) {
    throw Error(ErrorCode::unsupported,
                "tensor parallel " + std::to_string(w) + ": the " + std::to_string(config.n_head) +
                    " attention heads (attention.head_count) are not divisible by " + std::to_string(w) + " ranks");
  }
  plan.heads_per_rank = config.n_head / w;
  const bool has_moe = config.n_dense_lead < config.n_layer_main();
  if (has_moe && params.moe == MoeSplit::expert_parallel) plan.experts_per_rank = config.n_expert / w;
  plan.rank_bytes.assign(static_cast<size_t>(w), 0);

  const Planner planner(config, params);
  for (const TensorSpec& spec : expected_tensors(config)) {
    if (spec.mtp) continue;
    const gguf::TensorInfo* info = file.find_tensor(spec.name);
    if (!info) continue;  // absent optional tensors and unused alternatives; the audit reports real gaps
    TensorShard shard = planner.plan(*info);
    for (int r = 0; r < w; ++r) plan.rank_bytes[static_cast<size_t>(r)] += shard.rank_bytes[static_cast<size_t>(r)];
    plan.total_bytes += info->n_bytes;
    plan.tensors.push_back(std::move(shard));
  }

  const auto layers = static_cast<uint64_t>(config.n_layer_main());
  const auto indexer = static_cast<uint64_t>(config.has_indexer() ? config.indexer.head_dim : 0);
  plan.standard_cache_bytes_per_token =
      layers * sizeof(float) *
      (static_cast<uint64_t>(plan.heads_per_rank) * static_cast<uint64_t>(config.qk_head_dim() + config.v_head_dim) +
       indexer);
  plan.mla_cache_bytes_per_token =
      layers * sizeof(float) * (static_cast<uint64_t>(config.kv_lora_rank + config.qk_rope_head_dim) + indexer);
  return plan;
}

std::string ShardPlan::describe(bool with_tensors) const {
  std::ostringstream out;
  out << "tensor parallel " << world_size << ": " << heads_per_rank << " attention head(s) per rank";
  if (experts_per_rank > 0) out << ", " << experts_per_rank << " routed expert(s) per rank";
  out << ", MoE " << moe_split_name(moe) << "\n";
  if (with_tensors) {
    for (const TensorShard& t : tensors) {
      out << "  " << t.name << "  " << type_name(t.type) << "  " << shard_kind_name(t.kind);
      if (t.kind != ShardKind::replicated) {
        out << " (" << t.unit << "): rank r holds " << (t.kind == ShardKind::columns ? "columns" : "rows") << " ["
            << "r*" << t.ranges[0].count << ", (r+1)*" << t.ranges[0].count << ")";
        if (t.kind == ShardKind::group_rows) out << " of every " << t.group_rows << "-row expert group";
      }
      out << "  " << bytes_text(t.rank_bytes[0]) << "/rank\n";
    }
  }
  for (int r = 0; r < world_size; ++r) {
    const uint64_t b = rank_bytes[static_cast<size_t>(r)];
    char frac[32];
    std::snprintf(frac, sizeof frac, "%.1f%%",
                  total_bytes ? 100.0 * static_cast<double>(b) / static_cast<double>(total_bytes) : 0.0);
    out << "rank " << r << ": " << bytes_text(b) << " of weights (" << b << " bytes, " << frac << " of "
        << bytes_text(total_bytes) << ")\n";
  }
  out << "KV cache per token per rank (fp32): standard " << bytes_text(standard_cache_bytes_per_token)
      << " (this rank's heads), mla " << bytes_text(mla_cache_bytes_per_token) << " (own c|k_pe copy)\n";
  return out.str();
}

}  // namespace latte::detail
