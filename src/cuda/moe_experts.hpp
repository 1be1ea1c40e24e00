// The routed-expert FFN of a MoE layer on the GPU, given the router's choices:
//   out[t] (+)= sum_j w[t, j] * down_e( silu(gate_e x[t]) * up_e x[t] ),  e = ids[t, j]
// decode (n_tokens <= moe_gemv_max_tokens, 128): moe_sort into per-expert GEMV groups of up to 8 tokens
//   (sized to the step); one gated GEMV over gate+up (each group's expert rows read once for its tokens), one
//   gathered GEMV over down, moe_combine. One token: the router's choices as the groups, no sort.
// prefill: moe_sort into GEMM tiles; grouped fused GEMMs for gate and up (A rows gathered by token),
//   silu_gate to bf16, grouped GEMM for down, moe_combine.
// Shared experts are a plain dense FFN (gemv_quant / gemm_quant with the *_shexp tensors).
//
//   latte::cuda::MoeWorkspace ws({.max_tokens = 512, .k = 6, .n_experts = 64, .hidden = 2048, .ffn = 1408});
//   latte::cuda::moe_experts_prefill(experts, ws, {.x_bf16 = xb, ...}, stream);
#pragma once

#include <latte/quant.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device_buffer.hpp"
#include "cuda/gemm_quant.hpp"
#include "cuda/gemv_quant.hpp"
#include "cuda/norms.hpp"

namespace latte::cuda {

/// One stacked expert tensor ({in, out, E} in GGUF terms): E matrices of `rows` x `k`.
struct ExpertStack {
  GgmlType type = GgmlType::f32;
  const void* data = nullptr;       ///< device bytes of the whole stack
  int64_t bytes = 0;                ///< total bytes of the stack
  int64_t matrix_stride_bytes = 0;  ///< bytes per expert matrix
};

/// The three stacks of a MoE layer: gate/up {hidden, ffn, E}, down {ffn, hidden, E}.
struct MoeExpertWeights {
  ExpertStack gate, up, down;
  int n_experts = 0;
  int hidden = 0;  ///< H
  int ffn = 0;     ///< F, expert_feed_forward_length
};

/// Capacities a MoeWorkspace is sized for.
struct MoeWorkspaceShape {
  int max_tokens = 0;
  int k = 0;
  int n_experts = 0;
  int hidden = 0;
  int ffn = 0;
};

/// Device scratch of the expert FFN (sorting tables, per-slot intermediates). Reuse across layers.
class MoeWorkspace {
 public:
  explicit MoeWorkspace(const MoeWorkspaceShape& shape);
  [[nodiscard]] const MoeWorkspaceShape& shape() const noexcept { return shape_; }

  DeviceBuffer<int32_t> expert_offsets;  ///< [E + 1]
  DeviceBuffer<int32_t> slot_of_pair;    ///< [T k]
  DeviceBuffer<int32_t> token_of_slot;   ///< [T k]
  DeviceBuffer<GemmTile> tiles;          ///< [moe_max_tiles]
  DeviceBuffer<GemvGroup> groups;        ///< [min(max_tokens, moe_gemv_max_tokens) k]: one per pair at most
  DeviceBuffer<int32_t> counts;          ///< [2]: n_tiles, n_groups
  DeviceBuffer<float> gate_out;          ///< fp32 [T k, F] (decode: the gated product)
  DeviceBuffer<float> up_out;            ///< fp32 [T k, F]
  DeviceBuffer<__nv_bfloat16> act_bf16;  ///< bf16 [T k, F] prefill input of down
  DeviceBuffer<float> down_out;          ///< fp32 [T k, H]
  DeviceBuffer<uint8_t> act_q;  ///< decode: down's input as split-int8 records [min(max_tokens, moe_gemv_max_tokens) k]
  DeviceBuffer<int32_t> choice_slots;  ///< [k]: 0 .. k-1, the slots of one token's choices

 private:
  MoeWorkspaceShape shape_;
};

/// Inputs and output of one call. Pointers are device pointers.
struct MoeExpertsCall {
  const int32_t* ids = nullptr;    ///< [n_tokens, k] from moe_route
  const float* weights = nullptr;  ///< [n_tokens, k]
  int n_tokens = 0;
  int k = 0;
  const float* x = nullptr;               ///< decode input: fp32 [n_tokens, x_stride]
  const __nv_bfloat16* x_bf16 = nullptr;  ///< prefill input: bf16 [n_tokens, x_stride]
  int64_t x_stride = 0;
  const uint8_t* x_q = nullptr;  ///< decode, optional: x's rows as split-int8 records (GemvParams::x_q)
  int64_t x_q_stride = 0;
  float* out = nullptr;  ///< fp32 [n_tokens, out_stride]
  int64_t out_stride = 0;
  bool accumulate = false;  ///< out += experts (e.g. on top of the shared expert)
  /// Expert parallelism: the weights hold experts [held_first, held_first + n_experts) of the model
  /// and `ids` are the model's ids; choices of other experts add nothing. -1: ids index the weights.
  int held_first = -1;
  /// Decode, optional: out also gets add [n_tokens, add_stride] (fp32), in the combine, which first waits
  /// for `add_ready` (when set) on the stream: a shared expert computed alongside on another stream.
  const float* add = nullptr;
  int64_t add_stride = 0;
  cudaEvent_t add_ready = nullptr;
  /// Decode, optional: `ids` and `weights` are not made yet but are this router call's outputs
  /// (route->ids == ids, route->weights == weights); the one-token path routes inside its first GEMV
  /// (GemvParams::route), any other runs moe_route first.
  const MoeRouterParams* route = nullptr;
  /// Decode, optional: the combine then normalises the finished rows of `out` (MoeCombineParams::then_norm).
  RowNormTarget then_norm{};
};

/// Most tokens per GEMV group of the decode path for `pairs` (token, choice) pairs of n_tokens tokens over
/// n_experts, within 1..min(8, n_tokens): 1 where the mean pairs per expert is at most 1/2, 2 up to a mean of
/// 13/8, else 8; 16 where the mean is over 8 and the launches take groups that wide (`wide`): at 128 sequences x 6
/// of 64 experts an expert's ~12 tokens are then one group that reads its weights once, where groups of 8 read
/// them twice. Groups of 4 (the tensor-core GEMV's 4-token build) lost everywhere they were taken (H100, V2-Lite:
/// 12 / 16 sequences, means 1.1 / 1.5, 1,468 / 1,774 t/s against 1,703 / 1,872 in groups of 2; 20 sequences, mean
/// 1.9, 2,243 against 2,315 in groups of 8; BENCHMARKS.md). LATTE_MOE_GROUP_TOKENS (1-16) fixes it (more than 8
/// only where `wide`).
int moe_group_tokens(int pairs, int n_experts, int n_tokens, bool wide);

/// Decode path (n_tokens <= moe_gemv_max_tokens, fp32 x): GEMVs over groups of at most 8 of an expert's
/// tokens; with x_q they read split-int8 records, the down projection's made from the gated activations.
/// Throws Error on violated preconditions.
void moe_experts_decode(const MoeExpertWeights& w, MoeWorkspace& ws, const MoeExpertsCall& call, cudaStream_t stream);

/// Whether moe_experts_decode of `pairs` (token, choice) pairs given MoeExpertsCall::route routes them inside its sort
/// launch (MoeSortParams::route) where it takes no one-token path: up to moe_sort_route_max_pairs pairs, by
/// default (LATTE_MOE_ROUTE_IN_SORT=0: a moe_route launch before the sort).
bool moe_routes_in_sort(int pairs);
/// Most tokens per expert group for which moe_experts_decode's down quantizes the gated activations of its groups'
/// slots in its blocks (GemvParams::x_quantize, the records quantize_x_int8 would write) instead of a records launch
/// before it: LATTE_MOE_DOWN_QUANTIZE (0-16; by default 0, always the launch: 16 rows 2.1% slower on an H100,
/// BENCHMARKS.md).
int moe_down_quantize_tokens();
/// Prefill path (any n_tokens up to the workspace, bf16 x). Expert types need a fused GEMM.
void moe_experts_prefill(const MoeExpertWeights& w, MoeWorkspace& ws, const MoeExpertsCall& call, cudaStream_t stream);

}  // namespace latte::cuda
