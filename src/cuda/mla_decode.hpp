// Weight-absorbed MLA decode attention (flash-decoding over the latent cache). For every batch
// entry b, query token t (of q_len) and head h:
//   score(s) = scale * (q_latent[b,t,h] . c[b,s] + q_rope[b,t,h] . k_pe[b,s])   over visible positions s
//   out[b,t,h] = sum_s softmax(score)(s) * c[b,s]        (512 values; W_UV is applied by the caller)
//   lse[b,t,h] = ln sum_s exp(score(s))
// Dense: query t of q_len sees positions 0 .. kv_len[b] - q_len + t (causal; the step's own tokens
// are already in the cache). Sparse (GLM-5 DSA): the query sees only the positions listed in its
// index row.
//
//   MlaDecodePlan plan = plan_mla_decode(params);
//   DeviceBuffer<std::byte> workspace(plan.workspace_bytes); run_mla_decode(params, plan, workspace.data(),
//   workspace.size(), stream);
#pragma once

#include "cuda/kv_cache_layout.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace latte::cuda {

/// Latent width L and rope width R of an MLA cache row (c | k_pe), fixed by every supported model.
inline constexpr int kMlaLatentDim = 512;
inline constexpr int kMlaRopeDim = 64;
inline constexpr int kMlaCacheRow = kMlaLatentDim + kMlaRopeDim;  // 576 bf16 = 1152 bytes per token

/// Everything run_mla_decode reads and writes. Pointers are device pointers unless noted.
struct MlaDecodeParams {
  /// Absorbed query part W_UK^T q_nope: element (b, t, h, d < 512) at
  /// q_latent[(b * q_len + t) * q_latent_token_stride + h * q_latent_head_stride + d].
  const __nv_bfloat16* q_latent = nullptr;
  int64_t q_latent_token_stride = 0;  ///< elements, multiple of 8
  int64_t q_latent_head_stride = 0;   ///< elements, multiple of 8
  /// Roped query part: element (b, t, h, d < 64) at q_rope[(b * q_len + t) * q_rope_token_stride + h *
  /// q_rope_head_stride + d].
  const __nv_bfloat16* q_rope = nullptr;
  int64_t q_rope_token_stride = 0;
  int64_t q_rope_head_stride = 0;
  /// The latent cache: one row of 576 bf16 per position, c (512, normalised) then k_pe (64, roped);
  /// head_stride is unused.
  PagedRows<const __nv_bfloat16> cache;
  /// [batch] int32: valid positions of each sequence, including this step's q_len tokens (>= q_len).
  const int32_t* kv_lens = nullptr;
  /// Sparse mode when set: [batch, index_stride] int32 positions to attend (first top_k entries of each
  /// row are used; entries < 0 or >= kv_len are skipped). Requires q_len == 1.
  const int32_t* indices = nullptr;
  int32_t index_stride = 0;  ///< entries per row of `indices`
  int32_t top_k = 0;         ///< entries per row used in sparse mode
  int32_t batch = 0;         ///< sequences B
  int32_t q_len = 1;         ///< query tokens per sequence
  int32_t n_heads = 0;       ///< heads N (any positive count; 16-row tensor-core blocks are padded)
  int32_t max_kv_len = 0;    ///< host-side upper bound of every kv_lens[b] (dense mode), sizes the split plan
  float scale = 0.0f;        ///< softmax scale, mscale^2 / sqrt(P + R) (never 1/sqrt(576))
  AttnOutputType out_type = AttnOutputType::f32;
  void* out = nullptr;   ///< [batch, q_len, n_heads, 512] fp32 or bf16, contiguous
  float* lse = nullptr;  ///< [batch, q_len, n_heads] fp32 natural-log LSE, or nullptr
  /// Optional (dense mode): kv_lens, the page tables and every cache row of a sequence but its last q_len were
  /// written before the kernels this launch follows ran (a decode step of one new token per sequence: the rows of
  /// earlier steps). The launch then reads kv_lens and the page tables and starts the copies of its first tiles'
  /// earlier rows before it waits for those kernels (launch.cuh), so that their latency overlaps the kernels
  /// before it; the newest rows, the queries and everything else after the wait. LATTE_MLA_EARLY_TILES=0: never.
  bool earlier_rows_ready = false;
};

/// How the KV splits of a sequence are merged: by a combine launch after the decode (partial results in the
/// workspace), or inside the decode launch, where the splits of each (row group, sequence) run as one
/// thread-block cluster and merge through each other's shared memory (sm_90 and later, at most 8 splits, up
/// to 32 rows per sequence: no combine launch, no workspace). `automatic` takes the cheaper one for the shape,
/// the cluster only for one sequence's one or two row groups (LATTE_MLA_CLUSTER=0: never the cluster).
enum class MlaSplitMerge { automatic, combine_launch, cluster };

/// How run_mla_decode splits the work; from plan_mla_decode. Depends only on the shape
/// (batch, q_len, n_heads, max_kv_len or top_k) and the device, so one plan serves a captured graph.
struct MlaDecodePlan {
  int config = 0;              ///< compiled tile configuration (see mla_decode.cu)
  int rows_per_cta = 0;        ///< (token, head) rows one CTA computes (16, 32 or 64)
  int head_groups = 0;         ///< CTAs per (sequence, split) along the rows
  int splits = 0;              ///< KV splits per sequence (1: no combine step)
  bool cluster = false;        ///< the splits merge inside the launch, as a cluster (MlaSplitMerge::cluster)
  int chunk = 0;               ///< positions (dense) or index slots (sparse) per split, a multiple of the tile
  int threads = 0;             ///< threads per CTA
  size_t smem_bytes = 0;       ///< dynamic shared memory per CTA
  size_t workspace_bytes = 0;  ///< scratch for split partials (0 when splits == 1)
};

/// Chooses the tile configuration, split count and merge for the current CUDA device. `force_splits` > 0
/// overrides the split count and `merge` the merge (tests; a cluster takes at most 8 splits). `tile_tokens`
/// chooses the 16-row kernel's tile where up to 32 rows per sequence take it: 64 or 32 positions, 0 for
/// LATTE_MLA_DECODE_TILE (default 64); a device with ~100 KB of shared memory per block takes its own 32.
/// Throws Error(invalid_argument) on an invalid shape or tile, Error(unsupported) for a cluster merge the
/// device or the shape cannot have.
MlaDecodePlan plan_mla_decode(const MlaDecodeParams& params, int force_splits = 0,
                              MlaSplitMerge merge = MlaSplitMerge::automatic, int tile_tokens = 0);

/// Runs the decode (and the combine kernel when plan.splits > 1 without plan.cluster) on `stream`. `workspace` holds at
/// least plan.workspace_bytes device bytes. Checks every precondition and throws Error(invalid_argument)
/// naming the parameter at fault. Graph-capturable (no allocation, no synchronisation).
/// Bytes read: per sequence ~ visible positions * 1152 (once per head group; head groups of one
/// sequence run side by side and share L2), plus the queries. FLOPs: 2 * rows * positions * (576 + 512).
void run_mla_decode(const MlaDecodeParams& params, const MlaDecodePlan& plan, void* workspace, size_t workspace_bytes,
                    cudaStream_t stream);

}  // namespace latte::cuda
