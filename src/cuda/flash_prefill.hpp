// Flash-attention prefill over the decompressed per-head K/V cache, for a chunk of T query tokens of
// one sequence at absolute positions pos0 .. pos0 + T - 1 (the chunk's K/V already appended, so the
// cache holds positions 0 .. pos0 + T - 1). For query t and head h:
//   score(s) = scale * q[t,h] . k[s,h]   for s <= pos0 + t   (and, in sparse mode, s in the query's mask)
//   out[t,h] = sum_s softmax(score)(s) * v[s,h],   lse[t,h] = ln sum_s exp(score(s))
// Also usable for T = 1 or a few tokens (speculative decode) on the standard path.
//
//   run_flash_prefill({.q = q, .q_token_stride = N * 192, .q_head_stride = 192, .k_cache = k, .v_cache = v,
//                      .n_queries = T, .pos0 = p0, .n_heads = N, .head_dim_qk = 192, .head_dim_v = 128, ...}, stream);
#pragma once

#include "cuda/kv_cache_layout.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace latte::cuda {

/// Everything run_flash_prefill reads and writes. Pointers are device pointers.
/// Supported head dims (qk, v): (192, 128) DeepSeek, (256, 256) GLM-5.
struct FlashPrefillParams {
  /// Queries [nope | rope]: element (t, h, d < head_dim_qk) at q[t * q_token_stride + h * q_head_stride + d].
  const __nv_bfloat16* q = nullptr;
  int64_t q_token_stride = 0;              ///< elements, multiple of 8
  int64_t q_head_stride = 0;               ///< elements, multiple of 8
  PagedRows<const __nv_bfloat16> k_cache;  ///< (cache_batch, pos, h, d < head_dim_qk)
  PagedRows<const __nv_bfloat16> v_cache;  ///< (cache_batch, pos, h, d < head_dim_v)
  int32_t cache_batch = 0;                 ///< the sequence's batch entry in the caches (row of their page tables)
  int32_t n_queries = 0;                   ///< T
  int32_t pos0 = 0;                        ///< absolute position of query 0
  int32_t n_heads = 0;
  int32_t head_dim_qk = 0;
  int32_t head_dim_v = 0;
  float scale = 0.0f;  ///< mscale^2 / sqrt(P + R)
  /// Sparse mode when set: [n_queries, key_mask_stride] uint32 words; bit (s % 32) of word s / 32 of row t
  /// set = query t may attend to position s (still causal). Built by run_build_key_mask.
  const uint32_t* key_mask = nullptr;
  int64_t key_mask_stride = 0;  ///< words per query row, >= ceil((pos0 + T) / 32)
  AttnOutputType out_type = AttnOutputType::f32;
  void* out = nullptr;   ///< [n_queries, n_heads, head_dim_v] fp32 or bf16, contiguous
  float* lse = nullptr;  ///< [n_queries, n_heads] natural-log LSE, or nullptr
  /// Split keys: with a workspace of at least flash_prefill_workspace_bytes(params) bytes (16-byte aligned),
  /// each (query tile, head) runs as up to `splits` CTAs over consecutive key ranges and run_split_kv_combine
  /// merges their partial results (a chunk of few query tiles, e.g. 512 queries of 16 heads, otherwise
  /// fills 128 CTAs, one per SM, each walking every key tile at depth). Null: one CTA per (tile, head).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int32_t splits = 0;  ///< most key splits; 0: chosen for the device and the shape
};

/// Key splits run_flash_prefill takes for `params` when given a workspace (1: none). Depends on the shape,
/// params.splits and the current device only.
int flash_prefill_splits(const FlashPrefillParams& params);
/// Workspace bytes those splits need (0 for one split): n_queries * n_heads * splits * (head_dim_v + 1) floats.
size_t flash_prefill_workspace_bytes(const FlashPrefillParams& params);

/// Runs the prefill on `stream`; throws Error(invalid_argument) on a violated precondition
/// (Error(unsupported) when the device has too little shared memory per block).
/// FLOPs: ~ 2 * N * T * (pos0 + T/2) * (qk + v) (causal). Bytes: K/V of positions < pos0 + T for every
/// head, read once per query tile (128 queries at 192/128, 64 at 256/256; the tiles of one head run side by
/// side and share L2); with splits, the partial outputs written and read again (8 bytes per output value and
/// split).
void run_flash_prefill(const FlashPrefillParams& params, cudaStream_t stream);

/// Turns per-query position lists into the key mask of FlashPrefillParams.
struct KeyMaskParams {
  const int32_t* indices = nullptr;  ///< [n_queries, index_stride] int32 positions; < 0 or >= n_keys ignored
  int32_t index_stride = 0;
  int32_t top_k = 0;  ///< entries used per row
  int32_t n_queries = 0;
  int32_t n_keys = 0;        ///< positions covered by the mask (pos0 + T)
  uint32_t* mask = nullptr;  ///< [n_queries, mask_stride] words, every word of a row is written
  int64_t mask_stride = 0;   ///< >= ceil(n_keys / 32)
};

/// Builds the key mask on `stream` (one CTA per query row, the row assembled in shared memory).
void run_build_key_mask(const KeyMaskParams& params, cudaStream_t stream);

}  // namespace latte::cuda
