// Flash-decoding combine: merges the per-split partial results of a split-KV attention kernel into
// the final output and log-sum-exp, weighting split i by exp(lse_i - lse).
//
//   run_split_kv_combine({.partial_out = ws_out, .partial_lse = ws_lse, .rows = B * N, .splits = 4,
//                         .dim = 512, .out_type = AttnOutputType::f32, .out = out, .lse = lse}, stream);
#pragma once

#include "cuda/kv_cache_layout.hpp"

#include <cuda_runtime.h>

namespace latte::cuda {

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
