// Quantized matrix-vector products for decode: y[t] = W x[t] for 1..8 tokens in ONE pass over W, so
// that batched decode of several sequences reuses each weight load. W is a GGUF tensor in its file
// layout (rows of ggml blocks, any supported type); x and y are fp32 and the sum is fp32, so the
// result matches the CPU reference (dequantize_row + fp32 dot) to ~1e-6 relative. With x_q (1-8 tokens;
// Q4_K, Q5_K, Q6_K and the legacy 32-value types) x is read as split-int8 records instead: each value within
// 1/64516 of its group's largest (x_int8.hpp), integer dot products, fp32 scales and sums; gathered groups
// built for 3-8 tokens of Q4_K, Q5_K and the legacy types take those products on the int8 tensor cores
// (gemv_mma_kernel.cuh).
// Modes: dense (rows 0..n_tokens-1 of x), gathered (per-expert groups built on the device), gated
// (y = silu(W_gate x) * (W_up x), both stacks read in the same pass) and residual (y = W x + r).
//
//   latte::cuda::gemv_quant({.type = GgmlType::q4_k, .weight = w, .weight_bytes = wb, .n_rows = 2048,
//                            .k = 2048, .x = x, .x_stride = 2048, .y = y, .y_stride = 2048}, stream);
#pragma once

#include <latte/quant.hpp>

#include "cuda/moe_router.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace latte::cuda {

/// Most tokens one GEMV pass multiplies (more: use the GEMM).
inline constexpr int gemv_max_tokens = 8;
/// Most tokens of one gathered group: up to gemv_max_tokens for every split-int8 kernel, 9-16 only where the
/// tensor-core GEMV takes the launch (gemv_takes_wide_groups: the MoE experts of a step of ~100 sequences, where
/// an expert's ~12 tokens then read its weights once instead of in two groups of 8).
inline constexpr int gemv_group_max_tokens = 16;
/// Most rows of a dense launch: more than gemv_max_tokens only where gemv_takes_dense_rows says so.
inline constexpr int gemv_max_dense_rows = 128;

/// Most rows of a product that Linear runs as one dense launch over records (the tensor-core GEMV, 8 rows per row
/// of blocks): LATTE_GEMV_DENSE_ROWS (9-128), default 64; longer products dequantize the matrix for cuBLAS. The
/// forward pass makes records for that many rows.
int gemv_dense_rows();

/// One gathered group (device memory): `count` tokens multiplied by matrix `matrix` of the stack.
struct GemvGroup {
  int32_t matrix;                  ///< which matrix of the stacked tensor (the expert id)
  int32_t count;                   ///< tokens in this group, 0..16 (0: the group does nothing)
  int32_t x_row[gemv_group_max_tokens];  ///< row of x read for token i
  int32_t y_row[gemv_group_max_tokens];  ///< row of y written for token i
};

/// Everything one GEMV launch needs. Pointers are device pointers.
struct GemvParams {
  GgmlType type = GgmlType::f32;
  const void* weight = nullptr;       ///< matrix 0 of the stack: n_rows rows of row_bytes(type, k) bytes
  const void* weight_up = nullptr;    ///< optional: gated mode, y = silu(weight x) * (weight_up x)
  int64_t weight_bytes = 0;           ///< bytes readable from `weight` (and from `weight_up`): the stack
  int64_t matrix_stride_bytes = 0;    ///< bytes between matrices of the stack (gathered mode)
  int n_rows = 0;                     ///< output features per matrix
  int k = 0;                          ///< input features (a multiple of the block size; of 32 for floats)
  const float* x = nullptr;           ///< fp32 [rows, x_stride], 16-byte aligned, x_stride % 4 == 0
  int64_t x_stride = 0;               ///< floats between rows of x
  float* y = nullptr;                 ///< fp32 [rows, y_stride] (or null when y_bf16 is set)
  __nv_bfloat16* y_bf16 = nullptr;    ///< optional: y written as bf16 (round to nearest) here instead
  int64_t y_stride = 0;               ///< floats between rows of y
  const float* residual = nullptr;    ///< optional fp32 [rows, y_stride]: y = W x + residual (may be y)
  int n_tokens = 1;                   ///< dense mode: x rows 0..n-1 -> y rows 0..n-1 (1..8, see gemv_takes_dense_rows)
  const GemvGroup* groups = nullptr;  ///< gathered mode: groups[0 .. *n_groups) (device)
  const int32_t* n_groups = nullptr;  ///< gathered mode: device count of valid groups, <= max_groups
  int max_groups = 0;                 ///< gathered mode: grid size in groups (host bound)
  int max_tokens_per_group = 0;       ///< gathered mode: host bound on every groups[i].count (1..8; 9..16 where
                                      ///< gemv_takes_wide_groups says so)
  bool x_row_is_y_row = false;        ///< gathered mode: read x at y_row (MoE down: x is per slot)
  /// Optional: x's rows also as split-int8 records (x_int8.hpp), row r at x_q + r * x_q_stride. Launches of
  /// Q4_K, Q5_K, Q6_K and the legacy 32-value types then read these instead of x, with integer dot products
  /// (gemv_x8_kernel.cuh; LATTE_GEMV_INT8=0: never), when the tokens' records fit the kernel's shared
  /// memory (gemv_reads_x_int8 says which).
  const uint8_t* x_q = nullptr;
  int64_t x_q_stride = 0;  ///< bytes between records, a multiple of 16
  /// Optional, with x_q (split-int8 path only): expert choices (device, max_groups of them): group j
  /// multiplies matrix choice_ids[j] (clamped to the stack) with x row j / choices_per_token (0 when
  /// choices_per_token is 0; x_row_is_y_row: row j) into y row j. MoE decode without the sort into groups.
  const int32_t* choice_ids = nullptr;
  int choices_per_token = 0;
  /// Without x_q: the split-int8 path quantizes each block's fp32 x rows into its shared memory itself
  /// (the records quantize_x_int8 would write, so the same sums), where gemv_reads_x_int8 says it reads
  /// records; one launch less for x that nothing else reads as records. For one token per block: with
  /// more, every block repeats the quantization of all its tokens' rows.
  bool x_quantize = false;
  /// Optional, with x_quantize (split-int8 path only): each x row is first RMS-normalised, x_i /
  /// sqrt(mean(x^2) + x_norm_eps) * x_norm_weight[i] (fp32, as rms_norm), the block summing the squares
  /// itself: a one-token projection straight from the residual stream, one launch less.
  const float* x_norm_weight = nullptr;
  float x_norm_eps = 0.0f;
  /// Optional, with choice_ids == route.ids (one token, max_groups == route.k): each block chooses the
  /// token's experts itself from route.logits (the rule of moe_route, bit for bit) and multiplies its
  /// choice's; block (0, 0) writes route.ids and route.weights for the launches after this one. The
  /// MoE decode step's first expert GEMV without a router launch before it.
  MoeRouterParams route{};
  /// Set by gemv_quant (LATTE_GEMV_X_ASYNC): split-int8 blocks built for at least this many tokens stage their
  /// tokens' records with every copy in flight at once, the others token after token (x8_stage_records).
  int x_async_tokens = gemv_max_tokens;
  /// Set by the tensor-core GEMV's gathered launches (LATTE_GEMV_MMA_DEAL): the groups that exist are dealt over
  /// the grid's first deal_blocks blocks (one wave of resident blocks, every SM's slots filled), the rest exit;
  /// 0, or fewer than the groups that exist: over the whole grid.
  int deal_blocks = 0;
  /// Set by the staged tensor-core GEMV's gathered 16-token launches (LATTE_GEMV_MMA_PAIRS): a 1-D
  /// grid of one wave of blocks, block b walking the (group, tile) pairs [b T / grid, (b + 1) T / grid) of the T =
  /// groups x tiles that exist, restaging its x records where its range crosses into the next group.
  bool deal_pairs = false;
};

/// Launches y = W x (see GemvParams). Throws Error(invalid_argument) on a violated precondition and
/// Error(unsupported) for a type without a kernel.
void gemv_quant(const GemvParams& p, cudaStream_t stream);

/// Whether gemv_quant has a kernel for `type`: F32, F16, BF16, the legacy 32-value blocks, the K-quants (Q2_K-Q6_K),
/// MXFP4, IQ4_NL and IQ4_XS (dequantize_rows decodes the same types).
bool gemv_supports(GgmlType type) noexcept;

/// Whether a launch of `type` with `k` inputs and `tokens` tokens (per group) reads GemvParams::x_q when it
/// is given (the split-int8 GEMV: Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, the records in 64 KB; not
/// with LATTE_GEMV_INT8=0), so that a caller can skip making records nobody reads.
bool gemv_reads_x_int8(GgmlType type, int64_t k, int tokens = 1);

/// Whether a dense launch `p` of 9 to gemv_max_dense_rows rows (n_tokens) with records (x_q) runs: on the
/// int8 tensor cores in blocks of 8 rows (gemv_mma_kernel.cuh), for Q4_K, Q5_K and the legacy types with
/// rows of 1024 values or more whose 8 records fit the kernel; else gemv_quant refuses it.
bool gemv_takes_dense_rows(const GemvParams& p) noexcept;

/// Whether a dense launch `p` of 2 to gemv_max_dense_rows rows with records runs on the int8 tensor cores
/// (gemv_takes_dense_rows for 9 rows or more). Of up to 8 rows it does where the dp4a kernels take the rows too
/// (from LATTE_GEMV_MMA_DENSE_MIN rows) and where they cannot take the records at all: 3-8 rows of a dense
/// FFN's down (k = 10,944: 27 KB of records a token), which would otherwise go to the fp32 GEMV.
bool gemv_takes_dense_records(const GemvParams& p) noexcept;

/// Whether a gathered launch `p` with groups of 9 to gemv_group_max_tokens tokens (max_tokens_per_group) runs: on
/// the int8 tensor cores, two 8-token tiles per block against each weight fragment it decodes (gemv_mma_kernel.cuh),
/// for the types they take (Q4_K, Q5_K, Q6_K, the legacy types, IQ4_NL, IQ4_XS), with records or x_quantize, where
/// two blocks of 16 tokens' records fit a multiprocessor; else gemv_quant refuses it. Never with
/// LATTE_GEMV_MMA_WIDE_GROUPS=0.
bool gemv_takes_wide_groups(const GemvParams& p) noexcept;

/// Fewest tokens per block for which the split-int8 kernels stage x's records with all copies in flight at once
/// (LATTE_GEMV_X_ASYNC: 0 never, 1-8; default 8, the 8-token builds). Measured on an H200 (BENCHMARKS.md,
/// eleventh round): x8 +4% with 8 or 1, x4 +1-2% with 1 only, the rest within noise.
int gemv_x_async_tokens();

/// Whether one-token GEMVs without records quantize x themselves (GemvParams::x_quantize) where their
/// callers leave it to this switch (Linear): LATTE_GEMV_SELF_QUANTIZE=0 keeps them on the fp32 GEMV.
bool gemv_self_quantize();

/// Bytes the launch must move at least (weights read once, x read, y written); dense mode.
double gemv_min_bytes(const GemvParams& p);
/// Floating-point operations of the launch (2 per multiply-add); dense mode.
double gemv_flops(const GemvParams& p);

/// Per-type kernel launcher (defined in gemv_quant_*.cu); use gemv_quant().
template <GgmlType T>
void launch_gemv(const GemvParams& p, cudaStream_t stream);

}  // namespace latte::cuda
