// The conversion plan: every GGUF tensor of the output (llama.cpp's names and layouts for deepseek2 /
// glm-dsa), its element type, and where its rows come from in the checkpoint. Building the plan reads
// only headers; producing a tensor's rows decodes them from the memory-mapped shards on demand.
//
//   auto plan = latte::convert::plan_conversion(ckpt, hf, latte::convert::TypeMix::q4_k_m);
//   plan.tensors[0].produce_rows(0, 4, rows.data());   // 4 * ne[0] floats
#pragma once

#include "convert/hf_config.hpp"
#include "convert/safetensors.hpp"
#include "convert/source_matrix.hpp"
#include "convert/type_mix.hpp"

#include <latte/quant.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace latte::convert {

/// How an output tensor's rows are gathered from its sources.
enum class RowLayout {
  rows,             ///< the output rows are the source's rows: ne = the torch shape reversed
  stacked_experts,  ///< E sources of R rows each, expert after expert: ne = {cols, R, E}
  k_b,              ///< W_UK of kv_b_proj per head, transposed: ne = {P, L, N}; row h*L + l holds kv_b[h(P+V) + p][l]
  v_b,              ///< W_UV of kv_b_proj per head: ne = {L, V, N}; row h*V + v is kv_b row h(P+V) + P + v
  rope_pairs,       ///< rows, except the R rope rows at `rope_offset` of every `rope_period` rows: rope row
                    ///< 2i is the source's rope row i and 2i+1 its row i + R/2 (half-split pairs made adjacent)
};

/// One tensor of the output file.
struct PlannedTensor {
  std::string name;          ///< GGUF name, e.g. "blk.3.attn_k_b.weight"
  std::vector<uint64_t> ne;  ///< GGUF shape, ne[0] innermost
  GgmlType type = GgmlType::f32;
  RowLayout layout = RowLayout::rows;
  std::vector<SourceMatrix> sources;                      ///< one, or one per expert
  uint64_t n_head = 0, nope = 0, v_dim = 0, kv_lora = 0;  ///< N, P, V, L for k_b / v_b
  uint64_t rope_period = 0, rope_offset = 0, rope_dims = 0;  ///< for rope_pairs

  /// Number of rows (the product of ne[1..]).
  [[nodiscard]] uint64_t n_rows() const noexcept;
  /// Writes rows [first, first + count) as fp32 into `dst` (count * ne[0] floats).
  void produce_rows(uint64_t first, uint64_t count, float* dst) const;
  /// Bytes of checkpoint data read to produce the whole tensor (for progress).
  [[nodiscard]] uint64_t source_bytes() const noexcept;
};

/// Everything the converter writes, in file order.
struct ConversionPlan {
  HfModel model;
  std::vector<PlannedTensor> tensors;
  /// Checkpoint tensors deliberately left out (dropped MTP blocks, rotary caches), for the log.
  std::vector<std::string> skipped;
};

/// Maps the checkpoint onto `model`'s tensors. Throws Error(not_found) naming a required tensor the
/// checkpoint lacks, Error(invalid_file) naming a tensor whose shape differs from what config.json
/// implies (with both shapes) or a checkpoint tensor that has no place in the output.
ConversionPlan plan_conversion(const safetensors::Checkpoint& checkpoint, const HfModel& model, TypeMix mix);

}  // namespace latte::convert
