// The glm-dsa architecture (GLM-5): deepseek2 blocks plus the lightning indexer (see glm_dsa.cpp).
#pragma once

#include "model/deepseek2.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace latte::detail {

/// Appends the tensors of glm-dsa block `il` (deepseek2's plus the indexer's) to `out`.
void add_glm_dsa_block_tensors(const ModelConfig& config, int il, std::vector<TensorSpec>& out);

/// Writes into `out` (top_k slots) the positions of the top_k largest scores, ascending, ties going
/// to the lower position; slots past scores.size() are -1.
void select_top_positions(std::span<const float> scores, int top_k, std::span<int32_t> out);

/// deepseek2's forward pass with the indexer restricting attention to top_k positions per query.
class GlmDsaCpuForward : public Deepseek2CpuForward {
 public:
  GlmDsaCpuForward(const ModelState& model, AttentionBackend& backend, const TaskRunner& runner);
  /// One rank of a tensor-parallel group (the indexer is replicated on every rank).
  GlmDsaCpuForward(const ModelConfig& config, const ModelWeights& weights, AttentionBackend& backend,
                   const TaskRunner& runner, const RankContext* rank);

 protected:
  int select_positions(int il, const ForwardBatch& batch, Activations& act, std::vector<int32_t>& selection) override;

 private:
  struct KeyNorm {
    std::vector<float> weight, bias;  // [dI]
  };
  std::vector<KeyNorm> key_norms_;
  std::vector<float> keys_;                          // [T, dI]
  std::vector<float> queries_;                       // [T, nI, dI]
  std::vector<float> head_weights_;                  // [T, nI]
  std::vector<std::vector<float>> scores_;           // per worker [nI * n_kv + n_kv]
  std::vector<std::optional<NearTie>> forced_ties_;  // [T] checks of forced selections
};

}  // namespace latte::detail
