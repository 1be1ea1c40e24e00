// MoE expert dispatch: sorting (token, choice) pairs by expert into "slots", and combining the
// experts' outputs back per token. Deterministic: slots of one expert are in token order, and the
// combine sums each token's k outputs in choice order (no atomics).
//
//   moe_sort({.ids = ids, .n_tokens = t, .k = 6, .n_experts = 64, ...}, stream);   // pairs -> slots
//   moe_combine({.expert_out = d, .ld = 2048, .slot_of_pair = sp, .weights = w, ...}, stream);
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/gemm_quant.hpp"
#include "cuda/gemv_quant.hpp"
#include "cuda/moe_router.hpp"
#include "cuda/norms.hpp"

namespace latte::cuda {

/// Upper bound on the grouped-GEMM tiles of n_pairs pairs over n_experts experts.
constexpr int moe_max_tiles(int n_pairs, int n_experts) {
  return (n_pairs + gemm_tile_rows - 1) / gemm_tile_rows + n_experts;
}
/// Most tokens moe_sort builds GEMV groups for (MoE decode through the GEMV, moe_experts_decode).
inline constexpr int moe_gemv_max_tokens = 128;
/// Upper bound on the GEMV groups of n_pairs pairs over n_experts experts: an expert's pairs in groups of
/// at most `group_tokens`, so at most n_experts + n_pairs / group_tokens of them (and n_pairs).
constexpr int moe_max_groups(int n_pairs, int n_experts, int group_tokens) {
  const int bound = n_experts + n_pairs / group_tokens;
  return n_pairs < bound ? n_pairs : bound;
}

/// Pair p = t * k + j is token t's j-th choice. Outputs are device arrays the caller sizes.
struct MoeSortParams {
  const int32_t* ids = nullptr;  ///< [n_tokens * k] expert ids (0..n_experts-1; clamped)
  int n_tokens = 0;
  int k = 0;
  int n_experts = 0;  ///< 1..256
  /// Expert parallelism: the experts held are ids [held_first, held_first + n_experts) of the model;
  /// a pair whose id is outside gets no slot (slot_of_pair = -1, moe_combine skips it). -1: every id
  /// is one of the n_experts (clamped into range).
  int held_first = -1;
  int32_t* expert_offsets = nullptr;   ///< [n_experts + 1] first slot of each expert
  int32_t* slot_of_pair = nullptr;     ///< [n_tokens * k]
  int32_t* token_of_slot = nullptr;    ///< [n_tokens * k]
  GemmTile* tiles = nullptr;           ///< optional [moe_max_tiles]: grouped GEMM tiles
  int32_t* n_tiles = nullptr;          ///< with tiles: [1]
  GemvGroup* groups = nullptr;         ///< optional [moe_max_groups]: GEMV groups (n_tokens <= moe_gemv_max_tokens)
  int group_tokens = gemv_max_tokens;  ///< with groups: most tokens per group (1..16)
  int32_t* n_groups = nullptr;         ///< with groups: [1]
  /// Optional, where route.logits is set: the tokens are routed in this launch first (moe_route's rule, the same ids
  /// and weights bit for bit), where n_tokens k <= moe_sort_route_max_pairs: every block routes all of them into its
  /// shared memory and block 0 writes route.ids and route.weights, which must be `ids` and k per token (a launch
  /// fewer than moe_route + moe_sort).
  MoeRouterParams route{};
};

/// Most (token, choice) pairs moe_sort routes itself (MoeSortParams::route).
inline constexpr int moe_sort_route_max_pairs = 256;

/// Sorts pairs by expert (one block per expert). Throws Error(invalid_argument) on bad sizes.
void moe_sort(const MoeSortParams& p, cudaStream_t stream);

/// out[t] = (accumulate ? out[t] : 0) + sum_j weights[t, j] * expert_out[slot_of_pair[t * k + j]],
/// over the choices j with a slot (slot_of_pair >= 0).
struct MoeCombineParams {
  const float* expert_out = nullptr;  ///< fp32 [n_tokens * k slots, ld]
  int64_t ld = 0;
  const int32_t* slot_of_pair = nullptr;
  const float* weights = nullptr;  ///< [n_tokens, k]
  int n_tokens = 0;
  int k = 0;
  int hidden = 0;        ///< columns (a multiple of 4)
  float* out = nullptr;  ///< fp32 [n_tokens, out_stride]
  int64_t out_stride = 0;
  bool accumulate = false;
  const float* add = nullptr;  ///< optional fp32 [n_tokens, add_stride]: added too (a shared expert's output)
  int64_t add_stride = 0;
  /// Optional: each combined row then normalised (hidden % 32 == 0; one block of 256 threads per row): the
  /// next block's input norm in the launch that finishes the residual row.
  RowNormTarget then_norm{};
};

/// Launches the combine (and the normalisation). Throws Error(invalid_argument) on bad sizes or misalignment.
void moe_combine(const MoeCombineParams& p, cudaStream_t stream);

}  // namespace latte::cuda
