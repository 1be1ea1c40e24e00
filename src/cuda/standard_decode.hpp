// Decode attention over the decompressed ("standard") per-head K/V cache, one query token per
// sequence, split over the KV positions (flash-decoding). For every batch entry b and head h:
//   score(s) = scale * q[b,h] . k[b,s,h]      over s < kv_len[b] (dense) or s in indices[b] (sparse)
//   out[b,h] = sum_s softmax(score)(s) * v[b,s,h],   lse[b,h] = ln sum_s exp(score(s))
//
//   StandardDecodePlan plan = plan_standard_decode(params);
//   run_standard_decode(params, plan, workspace.data(), workspace.size(), stream);
#pragma once

#include "cuda/kv_cache_layout.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace latte::cuda {

/// Everything run_standard_decode reads and writes. Pointers are device pointers.
/// Supported head dims (qk, v): (192, 128) DeepSeek, (256, 256) GLM-5.
struct StandardDecodeParams {
  /// Queries [nope | rope]: element (b, h, d < head_dim_qk) at q[b * q_batch_stride + h * q_head_stride + d].
  const __nv_bfloat16* q = nullptr;
  int64_t q_batch_stride = 0;              ///< elements, multiple of 8
  int64_t q_head_stride = 0;               ///< elements, multiple of 8
  PagedRows<const __nv_bfloat16> k_cache;  ///< (b, pos, h, d < head_dim_qk)
  PagedRows<const __nv_bfloat16> v_cache;  ///< (b, pos, h, d < head_dim_v)
  const int32_t* kv_lens = nullptr;        ///< [batch] int32 valid positions (including the new token)
  /// Sparse mode when set: [batch, index_stride] positions (first top_k used; < 0 or >= kv_len skipped).
  const int32_t* indices = nullptr;
  int32_t index_stride = 0;
  int32_t top_k = 0;
  int32_t batch = 0;
  int32_t n_heads = 0;
  int32_t head_dim_qk = 0;
  int32_t head_dim_v = 0;
  int32_t max_kv_len = 0;  ///< host-side upper bound of kv_lens (dense), sizes the split plan
  float scale = 0.0f;      ///< mscale^2 / sqrt(P + R)
  AttnOutputType out_type = AttnOutputType::f32;
  void* out = nullptr;   ///< [batch, n_heads, head_dim_v] fp32 or bf16, contiguous
  float* lse = nullptr;  ///< [batch, n_heads] natural-log LSE, or nullptr
};

/// Split plan of run_standard_decode (depends on the shape and the device only).
struct StandardDecodePlan {
  int splits = 0;              ///< KV splits per (sequence, head)
  int chunk = 0;               ///< positions (or index slots) per split
  size_t workspace_bytes = 0;  ///< scratch for split partials (0 when splits == 1)
};

/// Chooses the split count for the current device; `force_splits` > 0 overrides it (tests).
StandardDecodePlan plan_standard_decode(const StandardDecodeParams& params, int force_splits = 0);

/// Runs the decode (+ combine when plan.splits > 1) on `stream`; throws Error(invalid_argument) on a
/// violated precondition. Bytes read: per (sequence, head) visible positions * (qk + v) * 2, i.e. per
/// token N * 640 B for DeepSeek dims: 8.9x the 1152-byte MLA latent row at 16 heads, 71x at 128.
/// FLOPs: 2 * B * N * positions * (qk + v). One warp per position: memory-bound.
void run_standard_decode(const StandardDecodeParams& params, const StandardDecodePlan& plan, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream);

}  // namespace latte::cuda
