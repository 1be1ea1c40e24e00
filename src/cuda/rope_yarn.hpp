// Rotary position embedding, interleaved pairing ((0,1), (2,3), ... as DeepSeek GGUFs and GLM-5 use),
// with YaRN frequency correction as ggml computes it:
//   theta_extrap = pos * base^(-2i / n_rot),  theta_interp = freq_scale * theta_extrap
//   ramp(i) = 1 - clamp((i - corr_low) / max(0.001, corr_high - corr_low), 0, 1)
//   theta = theta_interp * (1 - ramp * ext) + theta_extrap * ramp * ext
// cos/sin are NOT scaled (YaRN's magnitude factor goes into the attention scale). Applied in place to
// n_rot dims starting at rot_offset of each head: q's last R dims, k_pe, or the indexer's first 64;
// optionally also writes the dims before rot_offset (q_nope) as split-int8 records and the rotated ones as
// bf16, normalises one more row per token (the latent) and writes the latent and k_pe into their cache
// rows: one launch for what decode needs of q and c.
// Angles are computed in double, so positions up to millions keep full fp32 accuracy.
//
//   auto corr = latte::cuda::yarn_corr_dims(64, 4096, 10000.f, 32.f, 1.f);
//   latte::cuda::rope_yarn({.data = q, .token_stride = 3072, .n_heads = 16, .head_stride = 192,
//                           .rot_offset = 128, .n_rot = 64, .positions = pos, .n_tokens = t, ...}, stream);
#pragma once

#include "cuda/kv_cache_layout.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace latte::cuda {

/// ggml's YaRN correction range [low, high] in rotary pair indices.
struct YarnCorrDims {
  float low = 0.0f;
  float high = 0.0f;
};

/// ggml_rope_yarn_corr_dims: floor/ceil of the dims where the wavelength crosses beta_fast / beta_slow
/// rotations over the original context, clamped to [0, n_rot - 1].
YarnCorrDims yarn_corr_dims(int n_rot, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow);

struct RopeYarnParams {
  float* data = nullptr;  ///< fp32, token t head h dim d at data[t*token_stride + h*head_stride + d]
  int64_t token_stride = 0;
  /// Optional out-of-place source: the heads are read from here (token stride src_token_stride, the
  /// same head stride) and written to `data`, the dims before rot_offset copied unrotated. Without it
  /// the rotation is in place.
  const float* src = nullptr;
  int64_t src_token_stride = 0;
  /// Optional second target in the same launch: one head of n_rot dims (e.g. k_pe) read from
  /// pair_src[t*pair_src_stride ..] and written rotated to pair_dst[t*pair_dst_stride ..] (may alias).
  const float* pair_src = nullptr;
  int64_t pair_src_stride = 0;
  float* pair_dst = nullptr;
  int64_t pair_dst_stride = 0;
  /// Optional split-int8 records (x_int8.hpp) of each head's unrotated dims [0, rot_offset) as read
  /// (from src, or from data before the rotation): token t head h at nope_q[(t*n_heads + h)*nope_q_stride].
  /// For the decode GEMV of W_UK, which reads q_nope this way: one launch less per layer.
  uint8_t* nope_q = nullptr;
  int64_t nope_q_stride = 0;
  /// Optional: the rotated dims of each head also as bf16, token t head h at rot_bf16[(t*n_heads + h)*n_rot]
  /// (the MLA decode kernel's q_rope).
  __nv_bfloat16* rot_bf16 = nullptr;
  /// Optional: the unrotated dims [0, rot_offset) of each head as read (as nope_q) also as bf16, token t head h at
  /// nope_bf16[(t*n_heads + h)*rot_offset] (the A operand of the batched cuBLAS W_UK; 4-byte aligned).
  __nv_bfloat16* nope_bf16 = nullptr;
  /// Optional RMS normalisation in the same launch, one more block per token (the MLA latent's kv_a_norm):
  /// norm_dst[t*norm_dst_stride + i] = x_i / sqrt(mean(x^2) + norm_eps) * norm_weight[i] for the norm_n
  /// values x of norm_src[t*norm_src_stride ..] (fp32 sums, as rms_norm).
  const float* norm_src = nullptr;
  int64_t norm_src_stride = 0;
  const float* norm_weight = nullptr;
  float* norm_dst = nullptr;
  int64_t norm_dst_stride = 0;
  int norm_n = 0;
  float norm_eps = 1e-6f;
  /// Optional (with both the second target and the normalisation): their results also as bf16 into
  /// per-token cache rows, token t's row at cache(cache_batch[t] or 0, positions[t]): the normalised
  /// values from element cache_norm_offset, the rotated second target from cache_pair_offset (even). The
  /// MLA latent cache's c | k_pe, which the attention would otherwise append in a launch of its own.
  PagedRows<__nv_bfloat16> cache{};
  const int32_t* cache_batch = nullptr;
  int cache_norm_offset = 0;
  int cache_pair_offset = 0;
  int n_heads = 1;
  int64_t head_stride = 0;
  int rot_offset = 0;                  ///< first rotated dim within a head
  int n_rot = 0;                       ///< rotated dims (even)
  const int32_t* positions = nullptr;  ///< [n_tokens] device positions
  int n_tokens = 0;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;  ///< 1 / rope.scaling.factor
  float ext_factor = 0.0f;  ///< 1 under YaRN, 0 without
  YarnCorrDims corr{};
};

/// Launches the rotation (blocks of (token, group of heads); the second target and the normalisation,
/// if any, in one more block per token each). Throws Error(invalid_argument) on bad shapes.
void rope_yarn(const RopeYarnParams& p, cudaStream_t stream);

}  // namespace latte::cuda
