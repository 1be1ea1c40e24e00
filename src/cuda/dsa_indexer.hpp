// GLM-5 DeepSeek Sparse Attention (DSA) lightning indexer on the GPU: index scores and top-k
// selection. For query token t of batch entry b (q_len query tokens per entry, the last at position
// kv_len[b] - 1) and cached position s <= kv_len[b] - q_len + t:
//   I[b,t,s] = sum_h w[b,t,h] * ReLU(scale * q_I[b,t,h] . k_I[b,s])     (32 heads of 128 dims)
// then the top_k positions by I (ties: the lower position wins) are the only ones the main attention
// of that query sees; with fewer visible positions than top_k, all of them are selected.
//
//   run_dsa_index_scores(score_params, stream);   // scores [B * q_len, scores_stride] fp32
//   run_dsa_top_k(top_k_params, stream);          // indices [B * q_len, index_stride] int32
#pragma once

#include "cuda/kv_cache_layout.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace latte::cuda {

inline constexpr int kDsaIndexHeads = 32;     ///< indexer heads (GLM-5)
inline constexpr int kDsaIndexHeadDim = 128;  ///< indexer head dim (GLM-5)

/// Inputs and outputs of the indexer score kernel. Device pointers.
struct DsaIndexScoresParams {
  /// Roped indexer queries: element (b, t, h < 32, d < 128) at q[(b * q_len + t) * q_token_stride + h * q_head_stride +
  /// d].
  const __nv_bfloat16* q = nullptr;
  int64_t q_token_stride = 0;  ///< elements, multiple of 8
  int64_t q_head_stride = 0;   ///< elements, multiple of 8
  /// Head weights (indexer.proj(x) * 32^-0.5): element (b, t, h) at weights[(b * q_len + t) * weights_token_stride +
  /// h].
  const float* weights = nullptr;
  int64_t weights_token_stride = 0;
  PagedRows<const __nv_bfloat16> k_cache;  ///< indexer keys: (b, pos, 0, d < 128) bf16
  const int32_t* kv_lens = nullptr;        ///< [batch] int32, including this step's q_len tokens (>= q_len)
  int32_t batch = 0;
  int32_t q_len = 1;
  int32_t max_kv_len = 0;  ///< host-side upper bound of kv_lens
  float scale = 0.0f;      ///< inside the ReLU: 128^-0.5
  /// Output: element (b, t, s) at scores[(b * q_len + t) * scores_stride + s], written for every visible
  /// s (s < kv_len[b] - q_len + t + 1) and nowhere else.
  float* scores = nullptr;
  int64_t scores_stride = 0;  ///< >= max_kv_len
};

/// Computes the indexer scores on `stream`. FLOPs 2 * 32 * 128 per (query, position); bytes: the k_I
/// rows (256 B per position) once per group of 4 query tokens of an entry, plus the scores (4 B each).
void run_dsa_index_scores(const DsaIndexScoresParams& params, cudaStream_t stream);

/// Inputs and outputs of the top-k selection.
struct DsaTopKParams {
  const float* scores = nullptr;  ///< as written by run_dsa_index_scores (row r = b * q_len + t)
  int64_t scores_stride = 0;
  const int32_t* kv_lens = nullptr;  ///< [batch]: row (b, t) considers positions s < kv_len[b] - q_len + t + 1
  int32_t batch = 0;
  int32_t q_len = 1;
  int32_t top_k = 0;  ///< positions to select per row (2048 for GLM-5)
  /// Output [batch * q_len, index_stride] int32: the first top_k entries of each row hold the selected
  /// positions in ascending order, then -1 where fewer than top_k positions are visible.
  int32_t* indices = nullptr;
  int64_t index_stride = 0;  ///< >= top_k
};

/// Selects the top_k positions of every row on `stream` (one CTA per row: an exact 4-pass radix select
/// on the float keys, then an order-preserving compaction). Bytes: 5 reads of each visible score row.
void run_dsa_top_k(const DsaTopKParams& params, cudaStream_t stream);

}  // namespace latte::cuda
