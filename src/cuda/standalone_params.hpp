// Parameter blocks of the MoE and attention kernels for standalone launches at a model's shapes: the
// GPU self-test (selftest_cases.cpp) and `latte kernel-bench` run the kernels on buffers of their own,
// laid out contiguously, where the forward pass uses its paged caches and workspaces. The layouts and
// strides live here once; the callers only allocate and fill the buffers.
//
//   const latte::cuda::MoeShape m{.n_experts = 64, .k = 6, .hidden = 2048, .ffn = 1408, ...};
//   moe_experts_decode(moe_expert_weights(m, gate, up, down), ws, moe_experts_call(m, 1, {.ids = ids, ...}), s);
#pragma once

#include <latte/quant.hpp>

#include <cuda_bf16.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/flash_prefill.hpp"
#include "cuda/mla_decode.hpp"
#include "cuda/moe_experts.hpp"
#include "cuda/moe_router.hpp"
#include "cuda/standard_decode.hpp"

namespace latte::cuda {

// ---- MoE -----------------------------------------------------------------------------------------

/// A MoE layer's routing and expert dimensions.
struct MoeShape {
  int n_experts = 0;  ///< E
  int k = 0;          ///< experts per token
  int hidden = 0;     ///< H
  int ffn = 0;        ///< F, the expert width
  GgmlType gate_type = GgmlType::f32, up_type = GgmlType::f32, down_type = GgmlType::f32;
  MoeGating gating = MoeGating::softmax;
  int n_groups = 1;     ///< expert groups
  int groups_used = 1;  ///< groups a token may choose from
  bool normalize = false;
  float scale = 1.0f;  ///< expert_weights_scale
};

/// Bytes of one expert matrix of `rows` x `k` values of `type`.
int64_t expert_matrix_bytes(GgmlType type, int rows, int k);

/// The three stacks of `m.n_experts` experts, each stack one device allocation of matrices back to
/// back: gate and up E x (F x H), down E x (H x F).
MoeExpertWeights moe_expert_weights(const MoeShape& m, const void* gate, const void* up, const void* down);

/// The workspace capacities for up to `max_tokens` tokens.
MoeWorkspaceShape moe_workspace_shape(const MoeShape& m, int max_tokens);

/// The router over contiguous fp32 logits [n_tokens, E]; `selection_bias` ([E]) may be nullptr.
/// Writes ids and weights [n_tokens, k].
MoeRouterParams moe_router_params(const MoeShape& m, int n_tokens, const float* logits, const float* selection_bias,
                                  int32_t* ids, float* weights);

/// Device rows of routed tokens, contiguous: ids and weights [n_tokens, k]; x (fp32, the decode
/// path's input), x_bf16 (the prefill path's) and out [n_tokens, H]. An input the path does not read
/// may be nullptr.
struct RoutedTokens {
  const int32_t* ids = nullptr;
  const float* weights = nullptr;
  const float* x = nullptr;
  const __nv_bfloat16* x_bf16 = nullptr;
  float* out = nullptr;
};

/// The expert FFN call of `n_tokens` routed tokens (out overwritten).
MoeExpertsCall moe_experts_call(const MoeShape& m, int n_tokens, const RoutedTokens& tokens);

/// Random router choices: for each of `n_tokens` tokens, `m.k` distinct experts of `m.n_experts`, a
/// uniformly random subset in random order. [n_tokens, k]
std::vector<int32_t> random_expert_ids(const MoeShape& m, int n_tokens, std::mt19937_64& rng);

// ---- attention -----------------------------------------------------------------------------------

/// Attention over contiguous bf16 caches, each sequence's positions in one page of `capacity`:
///   MLA decode       cache [batch, capacity, 576] (c | k_pe), one query token per sequence
///   standard decode  K [batch, capacity, N, qk], V [batch, capacity, N, v], q [batch, N, qk]
///   flash prefill    one sequence: K [capacity, N, qk], V [capacity, N, v]; the queries [T, N, qk]
///                    are the last T positions (pos0 = capacity - T)
/// Outputs are contiguous ([batch or T, N, 512 or v]) of `out_type`.
struct AttentionShape {
  int batch = 1;        ///< sequences
  int n_heads = 0;      ///< N
  int capacity = 0;     ///< positions per sequence in the caches; decode: also max_kv_len
  int head_dim_qk = 0;  ///< standard decode and flash prefill (MLA rows are fixed)
  int head_dim_v = 0;
  float scale = 0.0f;
  AttnOutputType out_type = AttnOutputType::f32;
};

/// MLA decode inputs: q_latent (b, h, d < 512) at q_latent[(b * N + h) * q_latent_head_stride + d],
/// q_rope (b, h, d < 64) likewise (the two may interleave in one buffer of 576-element rows).
struct MlaDecodeBuffers {
  const __nv_bfloat16* q_latent = nullptr;
  int64_t q_latent_head_stride = kMlaLatentDim;
  const __nv_bfloat16* q_rope = nullptr;
  int64_t q_rope_head_stride = kMlaRopeDim;
  const __nv_bfloat16* cache = nullptr;
  const int32_t* kv_lens = nullptr;  ///< [batch]
  void* out = nullptr;
};

/// Dense MLA decode (set indices / top_k / index_stride for the sparse mode, lse for the LSE).
MlaDecodeParams mla_decode_params(const AttentionShape& s, const MlaDecodeBuffers& b);

/// Standard decode and flash prefill inputs (kv_lens: decode only, [batch]).
struct AttentionBuffers {
  const __nv_bfloat16* q = nullptr;
  const __nv_bfloat16* k = nullptr;
  const __nv_bfloat16* v = nullptr;
  const int32_t* kv_lens = nullptr;
  void* out = nullptr;
};

/// Dense standard decode.
StandardDecodeParams standard_decode_params(const AttentionShape& s, const AttentionBuffers& b);

/// Causal flash prefill of the last `n_queries` of `s.capacity` positions (s.batch must be 1; set
/// key_mask for the sparse mode).
FlashPrefillParams flash_prefill_params(const AttentionShape& s, int n_queries, const AttentionBuffers& b);

}  // namespace latte::cuda
