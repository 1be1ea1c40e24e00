// Contiguous-buffer parameter blocks of the MoE and attention kernels (standalone_params.hpp).
#include "cuda/standalone_params.hpp"

#include <latte/error.hpp>

#include <algorithm>
#include <numeric>
#include <string>

namespace latte::cuda {

int64_t expert_matrix_bytes(GgmlType type, int rows, int k) {
  return static_cast<int64_t>(rows) * static_cast<int64_t>(row_bytes(type, static_cast<uint64_t>(k)));
}

MoeExpertWeights moe_expert_weights(const MoeShape& m, const void* gate, const void* up, const void* down) {
  auto stack = [&](GgmlType type, const void* data, int rows, int k) {
    const int64_t matrix = expert_matrix_bytes(type, rows, k);
    return ExpertStack{.type = type, .data = data, .bytes = matrix * m.n_experts, .matrix_stride_bytes = matrix};
  };
  return {.gate = stack(m.gate_type, gate, m.ffn, m.hidden),
          .up = stack(m.up_type, up, m.ffn, m.hidden),
          .down = stack(m.down_type, down, m.hidden, m.ffn),
          .n_experts = m.n_experts,
          .hidden = m.hidden,
          .ffn = m.ffn};
}

MoeWorkspaceShape moe_workspace_shape(const MoeShape& m, int max_tokens) {
  return {.max_tokens = max_tokens, .k = m.k, .n_experts = m.n_experts, .hidden = m.hidden, .ffn = m.ffn};
}

MoeRouterParams moe_router_params(const MoeShape& m, int n_tokens, const float* logits, const float* selection_bias,
                                  int32_t* ids, float* weights) {
  return {.logits = logits,
          .logits_stride = m.n_experts,
          .n_tokens = n_tokens,
          .n_experts = m.n_experts,
          .selection_bias = selection_bias,
          .gating = m.gating,
          .k = m.k,
          .n_groups = m.n_groups,
          .groups_used = m.groups_used,
          .normalize = m.normalize,
          .scale = m.scale,
          .ids = ids,
          .weights = weights};
}

MoeExpertsCall moe_experts_call(const MoeShape& m, int n_tokens, const RoutedTokens& tokens) {
  return {.ids = tokens.ids,
          .weights = tokens.weights,
          .n_tokens = n_tokens,
          .k = m.k,
          .x = tokens.x,
          .x_bf16 = tokens.x_bf16,
          .x_stride = m.hidden,
          .out = tokens.out,
          .out_stride = m.hidden};
}

std::vector<int32_t> random_expert_ids(const MoeShape& m, int n_tokens, std::mt19937_64& rng) {
  if (m.k < 1 || m.k > m.n_experts || n_tokens < 0) {
    throw Error(ErrorCode::invalid_argument, "random_expert_ids: " + std::to_string(m.k) + " distinct experts of " +
                                                 std::to_string(m.n_experts) + " for " + std::to_string(n_tokens) +
                                                 " tokens");
  }
  std::vector<int32_t> ids(static_cast<size_t>(n_tokens) * static_cast<size_t>(m.k));
  std::vector<int32_t> perm(static_cast<size_t>(m.n_experts));
  for (int t = 0; t < n_tokens; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::copy_n(perm.begin(), m.k, ids.begin() + static_cast<ptrdiff_t>(t) * m.k);
  }
  return ids;
}

MlaDecodeParams mla_decode_params(const AttentionShape& s, const MlaDecodeBuffers& b) {
  MlaDecodeParams p;
  p.q_latent = b.q_latent;
  p.q_latent_token_stride = static_cast<int64_t>(s.n_heads) * b.q_latent_head_stride;
  p.q_latent_head_stride = b.q_latent_head_stride;
  p.q_rope = b.q_rope;
  p.q_rope_token_stride = static_cast<int64_t>(s.n_heads) * b.q_rope_head_stride;
  p.q_rope_head_stride = b.q_rope_head_stride;
  p.cache = {
      .data = b.cache, .page_stride = static_cast<int64_t>(s.capacity) * kMlaCacheRow, .token_stride = kMlaCacheRow};
  p.kv_lens = b.kv_lens;
  p.batch = s.batch;
  p.q_len = 1;
  p.n_heads = s.n_heads;
  p.max_kv_len = s.capacity;
  p.scale = s.scale;
  p.out_type = s.out_type;
  p.out = b.out;
  return p;
}

namespace {

/// A contiguous per-head cache [sequences, capacity, n_heads, dim].
PagedRows<const __nv_bfloat16> per_head_cache(const __nv_bfloat16* data, const AttentionShape& s, int dim) {
  return {.data = data,
          .page_stride = static_cast<int64_t>(s.capacity) * s.n_heads * dim,
          .token_stride = static_cast<int64_t>(s.n_heads) * dim,
          .head_stride = dim};
}

}  // namespace

StandardDecodeParams standard_decode_params(const AttentionShape& s, const AttentionBuffers& b) {
  StandardDecodeParams p;
  p.q = b.q;
  p.q_batch_stride = static_cast<int64_t>(s.n_heads) * s.head_dim_qk;
  p.q_head_stride = s.head_dim_qk;
  p.k_cache = per_head_cache(b.k, s, s.head_dim_qk);
  p.v_cache = per_head_cache(b.v, s, s.head_dim_v);
  p.kv_lens = b.kv_lens;
  p.batch = s.batch;
  p.n_heads = s.n_heads;
  p.head_dim_qk = s.head_dim_qk;
  p.head_dim_v = s.head_dim_v;
  p.max_kv_len = s.capacity;
  p.scale = s.scale;
  p.out_type = s.out_type;
  p.out = b.out;
  return p;
}

FlashPrefillParams flash_prefill_params(const AttentionShape& s, int n_queries, const AttentionBuffers& b) {
  if (s.batch != 1 || n_queries < 1 || n_queries > s.capacity) {
    throw Error(ErrorCode::invalid_argument, "flash_prefill_params: " + std::to_string(n_queries) + " queries of " +
                                                 std::to_string(s.capacity) + " positions in " +
                                                 std::to_string(s.batch) + " sequences (one sequence, 1..capacity)");
  }
  FlashPrefillParams p;
  p.q = b.q;
  p.q_token_stride = static_cast<int64_t>(s.n_heads) * s.head_dim_qk;
  p.q_head_stride = s.head_dim_qk;
  p.k_cache = per_head_cache(b.k, s, s.head_dim_qk);
  p.v_cache = per_head_cache(b.v, s, s.head_dim_v);
  p.cache_batch = 0;
  p.n_queries = n_queries;
  p.pos0 = s.capacity - n_queries;
  p.n_heads = s.n_heads;
  p.head_dim_qk = s.head_dim_qk;
  p.head_dim_v = s.head_dim_v;
  p.scale = s.scale;
  p.out_type = s.out_type;
  p.out = b.out;
  return p;
}

}  // namespace latte::cuda
