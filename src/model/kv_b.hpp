// The two layouts of MLA's up-projections W_UK (per head [P, L]) and W_UV (per head [V, L]), and
// exact conversions between them (pure permutations of values, so any element type round-trips).
//
//   fused attn_kv_b {L, N(P+V)}: rows grouped per head: P rows of W_UK_h, then V rows of W_UV_h
//                                (a per-head interleave, not all-K-then-all-V)
//   split attn_k_b {P, L, N}:    per head, L rows of P values: W_UK_h transposed
//         attn_v_b {L, V, N}:    per head, V rows of L values: W_UV_h
//
//   latte::split_kv_b(kv_b, dims, k_b, v_b);  latte::merge_kv_b(k_b, v_b, dims, kv_b);
#pragma once

#include <span>

namespace latte {

/// The dimensions the layouts depend on.
struct KvBDims {
  int n_head = 0;            ///< N
  int kv_lora_rank = 0;      ///< L
  int qk_nope_head_dim = 0;  ///< P
  int v_head_dim = 0;        ///< V
};

/// fused kv_b [N(P+V) rows, L] -> k_b [N, L, P] and v_b [N, V, L]. Throws Error(invalid_argument)
/// when a span's size does not match the dims.
void split_kv_b(std::span<const float> kv_b, const KvBDims& dims, std::span<float> k_b, std::span<float> v_b);

/// k_b [N, L, P] and v_b [N, V, L] -> fused kv_b [N(P+V) rows, L]; the inverse of split_kv_b.
void merge_kv_b(std::span<const float> k_b, std::span<const float> v_b, const KvBDims& dims, std::span<float> kv_b);

}  // namespace latte
