// MoE router: gating scores from ffn_gate_inp logits, group-limited top-k selection and the
// expert weights, one warp per token (E <= 256, k <= 8, groups <= 8), as DESIGN.md specifies:
//   score  = softmax(logits) or sigmoid(logits)
//   select = score + bias (bias: exp_probs_b, selection only)
//   groups: keep the `groups_used` groups with the largest sum of their top-2 `select` values
//   top-k of `select` inside kept groups; ties: the lower expert (or group) index wins
//   weight = score of the chosen expert; / sum of the k weights when `normalize`; * scale
//
//   latte::cuda::moe_route({.logits = l, .logits_stride = 64, .n_tokens = t, .n_experts = 64, .k = 6,
//                           .ids = ids, .weights = w}, stream);
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace latte::cuda {

/// expert_gating_func: 1 softmax (DeepSeek-V2), 2 sigmoid (V3, GLM-5).
enum class MoeGating { softmax, sigmoid };

inline constexpr int moe_max_experts = 256;
inline constexpr int moe_max_k = 8;
inline constexpr int moe_max_expert_groups = 8;

/// One router launch. Pointers are device pointers.
struct MoeRouterParams {
  const float* logits = nullptr;  ///< fp32 [n_tokens, logits_stride], first n_experts used
  int64_t logits_stride = 0;
  int n_tokens = 0;
  int n_experts = 0;                      ///< 1..256
  const float* selection_bias = nullptr;  ///< optional fp32 [n_experts], added for selection only
  MoeGating gating = MoeGating::softmax;
  int k = 1;                 ///< experts per token, 1..8
  int n_groups = 1;          ///< expert_group_count, 1..8, divides n_experts
  int groups_used = 1;       ///< expert_group_used_count, 1..n_groups
  bool normalize = false;    ///< expert_weights_norm
  float scale = 1.0f;        ///< expert_weights_scale
  int32_t* ids = nullptr;    ///< [n_tokens, k] chosen experts, best first
  float* weights = nullptr;  ///< [n_tokens, k] their weights
};

/// Launches the router. Throws Error(invalid_argument) on violated preconditions.
void moe_route(const MoeRouterParams& p, cudaStream_t stream);
/// moe_route's checks of p, for a launch that routes inside another kernel (GemvParams::route).
void check_moe_route(const MoeRouterParams& p);

}  // namespace latte::cuda
