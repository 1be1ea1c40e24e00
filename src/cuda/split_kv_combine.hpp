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

/// A split count and its cost in tile-times (cheapest_kv_split); splits == 0: no count was possible.
struct KvSplitChoice {
  int splits = 0;
  double cost = 0.0;
};

/// The split count in [min_splits, max_splits] of a split-KV launch with the least cost in tile-times: the waves
/// of its CTAs (base_ctas per split, slots(s) at a time; 0: s is not possible) times the tiles each walks plus ~2
/// of per-CTA start-up, plus merge_cost(s) for s > 1 splits. Counts that would leave a split without tiles are
/// passed over; of equal costs the fewest splits.
template <class Slots, class MergeCost>
KvSplitChoice cheapest_kv_split(int tiles, int min_splits, int max_splits, int64_t base_ctas, Slots slots,
                                MergeCost merge_cost) {
  KvSplitChoice best;
  for (int s = min_splits; s <= tiles && s <= max_splits; ++s) {
    const int per_split = (tiles + s - 1) / s;
    if ((tiles + per_split - 1) / per_split != s) continue;  // would leave splits empty
    const int64_t resident = slots(s);
    if (resident <= 0) continue;
    const int64_t waves = (base_ctas * s + resident - 1) / resident;
    const double cost = static_cast<double>(waves * (per_split + 2)) + (s > 1 ? merge_cost(s) : 0.0);
    if (best.splits == 0 || cost < best.cost) best = {s, cost};
  }
  return best;
}

/// cheapest_kv_split's count from 1 split up, with `slots` CTAs at a time whatever the count.
template <class CombineCost>
int cheapest_kv_splits(int tiles, int max_splits, int64_t base_ctas, int64_t slots, CombineCost combine_cost) {
  const KvSplitChoice best = cheapest_kv_split(
      tiles, 1, max_splits, base_ctas, [slots](int) { return slots; }, combine_cost);
  return best.splits > 0 ? best.splits : 1;
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
