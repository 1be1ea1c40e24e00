// Prefill GEMM on quantized weights with tensor cores: C[m, n] = sum_k A[m, k] * W[n, k] (+ R[m, n]).
// W stays in its GGUF layout; tiles of it are dequantized to bf16 in shared memory and multiplied with
// mma.sync m16n8k16 (bf16 operands, fp32 accumulation; portable to sm_90 / sm_100 / sm_120).
// A is bf16, C fp32. Dense mode: rows 0..m-1. Grouped mode (MoE prefill): a device list of tiles, each
// a run of <= 64 rows ("slots") of one group (expert), A rows optionally gathered through a_rows.
// Precision: each weight value is the fp32 dequantized value rounded once to bf16; the sum is fp32, so
// against a float64 reference on the same bf16-rounded operands the error is ~1e-6 relative.
//
//   latte::cuda::gemm_quant({.type = GgmlType::q4_k, .weight = w, .weight_bytes = wb, .n_rows = 3072,
//                            .k = 2048, .a = x_bf16, .lda = 2048, .c = q, .ldc = 3072, .m = 512}, stream);
#pragma once

#include <latte/quant.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace latte::cuda {

/// Rows per GEMM tile (tokens or slots); a GemmTile covers at most this many.
inline constexpr int gemm_tile_rows = 64;

/// One tile of the grouped GEMM (device memory): rows [row_begin, row_end) multiplied by matrix `group`.
struct GemmTile {
  int32_t group;
  int32_t row_begin;
  int32_t row_end;  ///< row_end - row_begin <= gemm_tile_rows
};

/// Everything one GEMM launch needs. Pointers are device pointers.
struct QuantGemmParams {
  GgmlType type = GgmlType::bf16;
  const void* weight = nullptr;      ///< matrix 0: n_rows rows of row_bytes(type, k); 16-byte aligned
  int64_t weight_bytes = 0;          ///< bytes readable from `weight` (the whole stack)
  int64_t matrix_stride_bytes = 0;   ///< bytes between the stack's matrices (grouped mode)
  int n_rows = 0;                    ///< N: output features
  int k = 0;                         ///< K: a multiple of 32 and of the block size
  const __nv_bfloat16* a = nullptr;  ///< bf16 [*, lda], 16-byte aligned, lda % 8 == 0
  int64_t lda = 0;
  const int32_t* a_rows = nullptr;  ///< optional: row m of the product reads A row a_rows[m]
  float* c = nullptr;               ///< fp32 [*, ldc]
  int64_t ldc = 0;
  const float* residual = nullptr;   ///< optional fp32 [*, ldc]: C = A W^T + residual (may be c)
  int m = 0;                         ///< dense mode: rows of A and C
  const GemmTile* tiles = nullptr;   ///< grouped mode: tiles[0 .. *n_tiles)
  const int32_t* n_tiles = nullptr;  ///< grouped mode: device count of valid tiles
  int max_tiles = 0;                 ///< grouped mode: grid size in tiles (host bound)
};

/// Whether gemm_quant has a fused kernel for `type` (others: dequantize to bf16 first).
bool gemm_quant_supports(GgmlType type) noexcept;

/// Launches the GEMM. Throws Error(invalid_argument) on violated preconditions, Error(unsupported)
/// for a type without a fused kernel.
void gemm_quant(const QuantGemmParams& p, cudaStream_t stream);

/// Bytes the launch must move at least (dense): weights once, A once, C written (and R read).
double gemm_min_bytes(const QuantGemmParams& p);
/// Floating-point operations (dense): 2 m n k.
double gemm_flops(const QuantGemmParams& p);

/// Per-type launcher (gemm_quant_*.cu); use gemm_quant().
template <GgmlType T>
void launch_gemm(const QuantGemmParams& p, cudaStream_t stream);

}  // namespace latte::cuda
