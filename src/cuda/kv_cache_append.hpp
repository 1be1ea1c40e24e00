// Writing new tokens into a KV cache (MLA latent rows, decompressed K/V, indexer keys), converting
// fp32 or bf16 activations to the cache's bf16.
//
//   // MLA: c (512) then k_pe (64) of n new tokens into the latent cache rows
//   run_kv_cache_append({.src = c, .src_type = AppendSourceType::f32, .src_token_stride = 512, .n_tokens = n,
//                        .n_heads = 1, .dim = 512, .dst = cache, .positions = pos}, stream);
#pragma once

#include "cuda/kv_cache_layout.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace latte::cuda {

/// Element type of the values being appended.
enum class AppendSourceType { f32, bf16 };

/// Copies n_tokens x n_heads rows of `dim` values into the cache:
///   dst(batch_index[i], positions[i], h, dst_offset + d) = bf16(src[i * src_token_stride + h * src_head_stride + d]).
struct KvCacheAppendParams {
  const void* src = nullptr;  ///< device, fp32 or bf16
  AppendSourceType src_type = AppendSourceType::f32;
  int64_t src_token_stride = 0;  ///< elements
  int64_t src_head_stride = 0;   ///< elements (unused when n_heads == 1)
  int32_t n_tokens = 0;
  int32_t n_heads = 1;
  int32_t dim = 0;                       ///< values per (token, head)
  PagedRows<__nv_bfloat16> dst;          ///< the cache; any alignment (scalar stores)
  int32_t dst_offset = 0;                ///< first element inside a (position, head) row, e.g. 512 for k_pe
  const int32_t* batch_index = nullptr;  ///< [n_tokens] batch entry of each token, or nullptr (all 0)
  const int32_t* positions = nullptr;    ///< [n_tokens] position of each token in its sequence
  /// Optional second segment of the same cache rows in the same launch (n_heads == 1, same source
  /// type): tail_dim values of tail_src (token stride tail_src_token_stride) at tail_dst_offset.
  const void* tail_src = nullptr;
  int64_t tail_src_token_stride = 0;
  int32_t tail_dim = 0;
  int32_t tail_dst_offset = 0;
};

/// Launches the copy on `stream`. The caller guarantees that positions fit the cache (the page table or
/// the contiguous capacity); throws Error(invalid_argument) on a bad shape or null pointer.
/// Bytes: n_tokens * n_heads * dim * (4 or 2) read + 2 written.
void run_kv_cache_append(const KvCacheAppendParams& params, cudaStream_t stream);

}  // namespace latte::cuda
