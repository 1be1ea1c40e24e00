// Flash-decoding combine: merges the per-split partial results of a split-KV attention kernel into
// the final output and log-sum-exp, weighting split i by exp(lse_i - lse).
//
//   run_split_kv_combine({.partial_out = ws_out, .partial_lse = ws_lse, .rows = B * N, .splits = 4,
//                         .dim = 512, .out_type = AttnOutputType::f32, .out = out, .lse = lse}, stream);
#pragma once

#include "cuda/kv_cache_layout.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace latte::cuda {

/// The split count of a split-KV launch with the least cost in tile-times: the waves of its CTAs (base_ctas
/// per split, `slots` at a time) times the tiles each walks plus ~2 of per-CTA start-up, plus combine_cost(s)
/// for s > 1 splits. Counts that would leave a split without tiles are passed over; at most max_splits.
template <class CombineCost>
int cheapest_kv_splits(int tiles, int max_splits, int64_t base_ctas, int64_t slots, CombineCost combine_cost) {
  int best = 1;
  double best_cost = 1e300;
  for (int s = 1; s <= tiles && s <= max_splits; ++s) {
    const int per_split = (tiles + s - 1) / s;
    if ((tiles + per_split - 1) / per_split != s) continue;  // would leave splits empty
    const int64_t waves = (base_ctas * s + slots - 1) / slots;
    const double cost = static_cast<double>(waves * (per_split + 2)) + (s > 1 ? combine_cost(s) : 0.0);
    if (cost < best_cost) {
      best_cost = cost;
      best = s;
    }
  }
  return best;
}

/// Inputs and outputs of the combine step. Reads rows * splits * (dim + 1) * 4 bytes, writes rows * dim
/// output elements and rows LSE values.
struct SplitKvCombineParams {
  const float* partial_out = nullptr;  ///< [rows, splits, dim] fp32: each split's normalised output
  const float* partial_lse = nullptr;  ///< [rows, splits] fp32: natural-log LSE of each split; -inf = empty split
  int rows = 0;                        ///< output rows (e.g. batch * q_len * heads)
  int splits = 0;                      ///< partial results per row
  int dim = 0;                         ///< values per row, a multiple of 4
  AttnOutputType out_type = AttnOutputType::f32;
  void* out = nullptr;   ///< [rows, dim] fp32 or bf16; a row with only empty splits gets zeros
  float* lse = nullptr;  ///< [rows] fp32 natural-log LSE (-inf for an empty row), or nullptr
};

/// Launches the combine kernel on `stream`. Throws Error(invalid_argument) on a bad shape or pointer.
void run_split_kv_combine(const SplitKvCombineParams& params, cudaStream_t stream);

}  // namespace latte::cuda
